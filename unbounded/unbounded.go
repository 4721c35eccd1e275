// Package unbounded is a go/analysis analyzer that reports blocking calls
// no context can bound, which a watchdog therefore cannot stop: the calls
// an agent orchestrator hangs in without a trace.
//
// It reports:
//
//   - exec.Command, whose process no context ends (use exec.CommandContext,
//     or watchdog.Command, which also kills the process group);
//   - http.Get, http.Head, http.Post, http.PostForm, the same methods of an
//     *http.Client, and http.NewRequest: requests without a context (use
//     http.NewRequestWithContext and Client.Do);
//   - net.Dial, which has no deadline (use a net.Dialer's DialContext);
//   - in a function that has a context.Context parameter, or where a
//     watched session (a *watchdog.Session parameter or local variable) is
//     in scope, a call that passes context.Background() or context.TODO()
//     where a context goes: the caller's deadline and the session's verdict
//     never reach it. That holds for calls through function values too:
//     tools["search"](context.Background(), q) on a map of tools, a
//     func-typed parameter, field or variable. In a function that has a
//     context, a context derived from context.Background()
//     (context.WithTimeout(context.Background(), d)) is reported as well:
//     it drops the caller's deadline all the same. Where only a session is
//     in scope, neither calls of the watchdog library itself (Close, Check,
//     Start...), whose context is the caller's to choose, nor a context
//     derived from context.Background() (a context of its own, on purpose)
//     are reported.
//
// A line, or the line above it, with a comment "//watchdog:unbounded
// <reason>" accepts the call on purpose; the reason is required.
//
// Run it with go vet -vettool=$(which unbounded) ./..., or as the command
// unbounded ./... (github.com/sessionwatchdog/watchdog/unbounded/cmd/unbounded).
package unbounded

import (
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"
)

// Analyzer reports blocking calls no context can bound.
var Analyzer = &analysis.Analyzer{
	Name:     "unbounded",
	Doc:      "report blocking calls that no context can bound (exec.Command, http.Get, net.Dial, calls on context.Background inside a function that has a context or a watched session)",
	URL:      "https://pkg.go.dev/github.com/sessionwatchdog/watchdog/unbounded",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// advice is what to use instead of each function without a context, by its
// full name (types.Func.FullName).
var advice = map[string]string{
	"os/exec.Command":             "exec.Command: no context ends its process; use exec.CommandContext or watchdog.Command",
	"net/http.Get":                "http.Get has no context; use http.NewRequestWithContext and Client.Do",
	"net/http.Head":               "http.Head has no context; use http.NewRequestWithContext and Client.Do",
	"net/http.Post":               "http.Post has no context; use http.NewRequestWithContext and Client.Do",
	"net/http.PostForm":           "http.PostForm has no context; use http.NewRequestWithContext and Client.Do",
	"(*net/http.Client).Get":      "Client.Get has no context; use http.NewRequestWithContext and Client.Do",
	"(*net/http.Client).Head":     "Client.Head has no context; use http.NewRequestWithContext and Client.Do",
	"(*net/http.Client).Post":     "Client.Post has no context; use http.NewRequestWithContext and Client.Do",
	"(*net/http.Client).PostForm": "Client.PostForm has no context; use http.NewRequestWithContext and Client.Do",
	"net/http.NewRequest":         "http.NewRequest makes a request without a context; use http.NewRequestWithContext",
	"net.Dial":                    "net.Dial has no deadline; use a net.Dialer's DialContext",
	"(*net.Dialer).Dial":          "Dialer.Dial has no context; use DialContext",
	"net.DialTCP":                 "net.DialTCP has no deadline; use a net.Dialer's DialContext",
	"net.DialUDP":                 "net.DialUDP has no deadline; use a net.Dialer's DialContext",
	"net.DialUnix":                "net.DialUnix has no deadline; use a net.Dialer's DialContext",
}

const directive = "//watchdog:unbounded"

func run(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	accepted := acceptedLines(pass)
	report := func(call *ast.CallExpr, pos token.Pos, msg string) {
		p := pass.Fset.Position(pos)
		reason, ok := accepted[lineKey{p.Filename, p.Line}]
		if !ok { // a directive over a multi-line call's first line covers its arguments
			c := pass.Fset.Position(call.Pos())
			reason, ok = accepted[lineKey{c.Filename, c.Line}]
		}
		if ok {
			if reason != "" {
				return
			}
			msg += " (a " + directive + " comment needs a reason)"
		}
		pass.Reportf(pos, "%s", msg)
	}
	// The functions with a context.Context parameter, innermost last.
	var stack []bool
	ins.Nodes([]ast.Node{(*ast.FuncDecl)(nil), (*ast.FuncLit)(nil), (*ast.CallExpr)(nil)}, func(n ast.Node, push bool) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if push {
				stack = append(stack, hasContextParam(pass, n.Type))
			} else {
				stack = stack[:len(stack)-1]
			}
		case *ast.FuncLit:
			if push { // a closure sees its enclosing function's context
				stack = append(stack, hasContextParam(pass, n.Type) || len(stack) > 0 && stack[len(stack)-1])
			} else {
				stack = stack[:len(stack)-1]
			}
		case *ast.CallExpr:
			if !push {
				return true
			}
			if tv, ok := pass.TypesInfo.Types[n.Fun]; ok && tv.IsType() {
				return true // a conversion
			}
			callee := typeutil.Callee(pass.TypesInfo, n)
			if _, ok := callee.(*types.Builtin); ok {
				return true
			}
			// fn is nil for a call through a function value: a map of
			// tools (tools["search"](ctx, q)), a func-typed parameter,
			// field or variable, a function literal called at once.
			fn, _ := callee.(*types.Func)
			if fn != nil {
				if msg := advice[fn.FullName()]; msg != "" {
					report(n, n.Lparen, msg)
				}
			}
			hasCtx := len(stack) > 0 && stack[len(stack)-1]
			for _, arg := range n.Args {
				name := detached(pass, arg)
				switch {
				case name == "":
				case hasCtx:
					report(n, arg.Pos(), name+" where the function has a context: the caller's deadline and the watchdog's verdict never reach this call; pass the context")
				case sessionRule(fn) && sessionInScope(pass, n.Pos()):
					report(n, arg.Pos(), name+" where a watched session is in scope: its verdict never reaches this call; pass the session's Context()")
				}
			}
		}
		return true
	})
	return nil, nil
}

// detached returns "context.Background()" or "context.TODO()" if arg is
// that call, else "".
func detached(pass *analysis.Pass, arg ast.Expr) string {
	call, ok := ast.Unparen(arg).(*ast.CallExpr)
	if !ok {
		return ""
	}
	fn, _ := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
	if fn == nil {
		return ""
	}
	switch fn.FullName() {
	case "context.Background":
		return "context.Background()"
	case "context.TODO":
		return "context.TODO()"
	}
	return ""
}

// hasContextParam reports whether a function of type ft has a parameter of
// type context.Context.
func hasContextParam(pass *analysis.Pass, ft *ast.FuncType) bool {
	if ft == nil || ft.Params == nil {
		return false
	}
	for _, f := range ft.Params.List {
		if t := pass.TypesInfo.TypeOf(f.Type); t != nil && isContext(t) {
			return true
		}
	}
	return false
}

// sessionInScope reports whether a variable of type *watchdog.Session (or
// watchdog.Session) declared in a function is in scope at pos: a
// parameter, or a local declared before pos.
func sessionInScope(pass *analysis.Pass, pos token.Pos) bool {
	pkg := pass.Pkg.Scope()
	for sc := pkg.Innermost(pos); sc != nil && sc != pkg && sc != types.Universe; sc = sc.Parent() {
		for _, name := range sc.Names() {
			v, ok := sc.Lookup(name).(*types.Var)
			if !ok || !isSession(v.Type()) {
				continue
			}
			if _, obj := sc.LookupParent(name, pos); obj == v { // declared before pos
				return true
			}
		}
	}
	return false
}

// sessionRule reports whether a call of fn (nil: through a function value)
// is one the session rule applies to: not the library's own (Close,
// Check, Start...), whose context is the caller's to choose, nor the
// context package's (a context derived on purpose).
func sessionRule(fn *types.Func) bool {
	return fn == nil || !ofLibrary(fn) && fn.Pkg() != nil && fn.Pkg().Path() != "context"
}

// ofLibrary reports whether fn is the watchdog library's own (Close, Check,
// Start...), whose context is the caller's to choose, not the session's.
func ofLibrary(fn *types.Func) bool {
	p := fn.Pkg()
	return p != nil && (p.Path() == libPath || strings.HasPrefix(p.Path(), libPath+"/"))
}

const libPath = "github.com/sessionwatchdog/watchdog"

// isSession reports whether t is watchdog.Session or a pointer to it.
func isSession(t types.Type) bool {
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == libPath && obj.Name() == "Session"
}

func isContext(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == "context" && obj.Name() == "Context"
}

type lineKey struct {
	file string
	line int
}

// acceptedLines maps each line a //watchdog:unbounded comment covers (its
// own and the next) to the comment's reason.
func acceptedLines(pass *analysis.Pass) map[lineKey]string {
	out := map[lineKey]string{}
	for _, f := range pass.Files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				rest, ok := strings.CutPrefix(c.Text, directive)
				if !ok || rest != "" && rest[0] != ' ' && rest[0] != '\t' {
					continue // another directive, such as //watchdog:unboundedness
				}
				reason := strings.TrimSpace(rest)
				p := pass.Fset.Position(c.Slash)
				out[lineKey{p.Filename, p.Line}] = reason
				out[lineKey{p.Filename, p.Line + 1}] = reason
			}
		}
	}
	return out
}
