package watchdog_test

import (
	"context"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// exportedFuncs lists the package's exported functions and the exported
// methods of its exported types, as "Name" or "Type.Name".
func exportedFuncs(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool {
		ok, err := build.Default.MatchFile(".", fi.Name()) // this platform's files
		return err == nil && ok && !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	require.NoError(t, err)
	var out []string
	for _, f := range pkgs["watchdog"].Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil {
				typ := fd.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				id, ok := typ.(*ast.Ident)
				if !ok || !id.IsExported() {
					continue
				}
				name = id.Name + "." + name
			}
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Every exported function and method, called with the zero value of each
// argument (a nil context, a nil session or function, an empty name), does
// not panic: what takes a context or a pointer returns an error wrapping
// ErrInvalidArgument (or the documented zero result). The list is checked
// against the package's source, so a new function without a case fails.
func TestEveryExportedFunctionTakesZeroValuesWithoutPanicking(t *testing.T) {
	var nilCtx context.Context
	invalid := func(t *testing.T, err error) {
		t.Helper()
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	}
	newSession := func(t *testing.T) (*watchdog.Watchdog, *watchdog.Session) {
		w := newWatchdog(t, newMock(), watchdog.NewMemoryStore())
		s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
		require.NoError(t, err)
		return w, s
	}
	cases := map[string]func(t *testing.T){
		"Call": func(t *testing.T) { invalid(t, watchdog.Call(nilCtx, "", 0, nil)) },
		"Event.MarshalJSON": func(t *testing.T) {
			_, err := watchdog.Event{}.MarshalJSON()
			require.NoError(t, err)
		},
		"Event.Terminal": func(t *testing.T) { assert.False(t, watchdog.Event{}.Terminal()) },
		"Event.UnmarshalJSON": func(t *testing.T) {
			var e watchdog.Event
			require.Error(t, e.UnmarshalJSON(nil))
		},
		"Event.Validate": func(t *testing.T) { require.ErrorIs(t, watchdog.Event{}.Validate(), watchdog.ErrInvalidEvent) },
		"Follow": func(t *testing.T) {
			_, _, err := watchdog.Follow(nilCtx, nil, "")
			invalid(t, err)
			_, _, err = watchdog.Follow(context.Background(), nil, "s")
			invalid(t, err)
		},
		"RecordCheckpoint": func(t *testing.T) {
			invalid(t, watchdog.RecordCheckpoint(nilCtx, nil, watchdog.Checkpoint{}))
			invalid(t, watchdog.RecordCheckpoint(context.Background(), watchdog.NewMemoryStore(), watchdog.Checkpoint{}))
		},
		"Begin": func(t *testing.T) {
			h, err := watchdog.Begin(nilCtx, "", watchdog.CallLimits{})
			invalid(t, err)
			assert.Nil(t, h)
			_, err = watchdog.Begin(context.Background(), "x", watchdog.CallLimits{})
			invalid(t, err)
		},
		"CallHandle.Context": func(t *testing.T) {
			for _, h := range []*watchdog.CallHandle{nil, {}} {
				invalid(t, context.Cause(h.Context()))
			}
		},
		"CallHandle.End": func(t *testing.T) {
			for _, h := range []*watchdog.CallHandle{nil, {}} {
				invalid(t, h.End(nil))
			}
		},
		"CallHandle.Run": func(t *testing.T) {
			for _, h := range []*watchdog.CallHandle{nil, {}} {
				invalid(t, h.Run(nil))
			}
			h, err := watchdog.Begin(context.Background(), "x", watchdog.CallLimits{Cap: time.Minute})
			require.NoError(t, err)
			invalid(t, h.Run(nil))
		},
		"Progress":    func(t *testing.T) { assert.False(t, watchdog.Progress(nilCtx, 0)) },
		"FromContext": func(t *testing.T) { assert.Nil(t, watchdog.FromContext(nilCtx)) },
		"MemoryStore.Append": func(t *testing.T) {
			invalid(t, watchdog.NewMemoryStore().Append(nilCtx))
			require.ErrorIs(t, watchdog.NewMemoryStore().Append(context.Background(), watchdog.Event{}), watchdog.ErrInvalidEvent)
		},
		"MemoryStore.Load": func(t *testing.T) {
			_, err := watchdog.NewMemoryStore().Load(nilCtx, "")
			invalid(t, err)
		},
		"MemoryStore.Subscribe": func(t *testing.T) {
			_, err := watchdog.NewMemoryStore().Subscribe(nilCtx, "")
			invalid(t, err)
		},
		"Mismatch.String": func(t *testing.T) { assert.NotEmpty(t, watchdog.Mismatch{}.String()) },
		"New": func(t *testing.T) {
			w := watchdog.New(nil, watchdog.WithAction(nil), watchdog.WithClock(nil), watchdog.WithEventIDPrefix(""),
				watchdog.WithLogger(nil), watchdog.WithObserver(watchdog.Observer{}), watchdog.WithRetryBackoff(0, 0), watchdog.WithStore(nil))
			require.NoError(t, w.Close(context.Background()))
		},
		"NewMemoryStore": func(t *testing.T) { assert.NotNil(t, watchdog.NewMemoryStore()) },
		"IdleAfter": func(t *testing.T) {
			require.NoError(t, watchdog.IdleAfter(0).Validate()) // the idle rule off, as IdleWindow 0
			require.ErrorIs(t, watchdog.IdleAfter(-time.Second).Validate(), watchdog.ErrInvalidPolicy)
		},
		"NewMemoryStoreWithRetention": func(t *testing.T) {
			m, err := watchdog.NewMemoryStoreWithRetention(watchdog.Retention{})
			require.NoError(t, err)
			assert.NotNil(t, m)
		},
		"Policy.MarshalJSON": func(t *testing.T) {
			_, err := watchdog.Policy{}.MarshalJSON()
			require.NoError(t, err)
		},
		"Policy.UnmarshalJSON": func(t *testing.T) {
			var p watchdog.Policy
			require.ErrorIs(t, p.UnmarshalJSON(nil), watchdog.ErrInvalidPolicy)
		},
		"Policy.Validate": func(t *testing.T) { require.NoError(t, watchdog.Policy{}.Validate()) },
		"Replay": func(t *testing.T) {
			m, err := watchdog.Replay(nil)
			require.NoError(t, err)
			assert.Empty(t, m)
		},
		"Result.MarshalJSON": func(t *testing.T) {
			_, err := watchdog.Result{}.MarshalJSON()
			require.NoError(t, err)
		},
		"RunPhase": func(t *testing.T) {
			_, _, err := watchdog.RunPhase[int](nil, "", 0, nil)
			invalid(t, err)
			_, _, err = watchdog.RunPhase(nil, "plan", 0, func(context.Context, int) (int, error) { return 0, nil })
			invalid(t, err)
		},
		"Session.BeginChildWait": func(t *testing.T) { _, s := newSession(t); s.BeginChildWait()() },
		"Session.Channel": func(t *testing.T) {
			_, s := newSession(t)
			_, err := s.Channel("")
			invalid(t, err)
		},
		"Session.Context":  func(t *testing.T) { _, s := newSession(t); assert.NotNil(t, s.Context()) },
		"Session.Deadline": func(t *testing.T) { _, s := newSession(t); assert.False(t, s.Deadline().IsZero()) },
		"Session.EndWait":  func(t *testing.T) { _, s := newSession(t); assert.False(t, s.EndWait()) },
		"Session.ID":       func(t *testing.T) { _, s := newSession(t); assert.Equal(t, "s", s.ID()) },
		"Session.Progress": func(t *testing.T) { _, s := newSession(t); s.Progress(0, 0) },
		"Session.ReportLiveness": func(t *testing.T) {
			_, s := newSession(t)
			_, err := s.ReportLiveness("", false)
			invalid(t, err)
		},
		"Session.Run": func(t *testing.T) {
			_, s := newSession(t)
			_, err := s.Run(nil)
			invalid(t, err)
		},
		"Session.StartedAt": func(t *testing.T) { _, s := newSession(t); assert.Equal(t, t0, s.StartedAt()) },
		"Session.Stop":      func(t *testing.T) { _, s := newSession(t); require.NoError(t, s.Stop()) },
		"Session.StopBy": func(t *testing.T) {
			_, s := newSession(t)
			invalid(t, s.StopBy("", ""))
			invalid(t, (*watchdog.Session)(nil).StopBy("", ""))
		},
		"Session.SaveProgress": func(t *testing.T) {
			_, s := newSession(t)
			require.NoError(t, s.SaveProgress(0, nil))
			invalid(t, (*watchdog.Session)(nil).SaveProgress(0, nil))
		},
		"Session.LastProgress": func(t *testing.T) {
			_, s := newSession(t)
			n, p := s.LastProgress()
			assert.Zero(t, n)
			assert.Nil(t, p)
			n, p = (*watchdog.Session)(nil).LastProgress()
			assert.Zero(t, n)
			assert.Nil(t, p)
		},
		"Session.Amend": func(t *testing.T) {
			_, s := newSession(t)
			_, err := s.Amend(nilCtx, watchdog.Policy{}, "", "")
			invalid(t, err)
			var none *watchdog.Session
			_, err = none.Amend(context.Background(), watchdog.Policy{}, "a", "b")
			invalid(t, err)
		},
		"Session.Touch": func(t *testing.T) { _, s := newSession(t); s.Touch(0) },
		"Session.Wait":  func(t *testing.T) { _, s := newSession(t); s.Wait(0, nil) },
		"Session.WatchWorkspace": func(t *testing.T) {
			_, s := newSession(t)
			invalid(t, s.WatchWorkspace(""))
		},
		"Session.Window": func(t *testing.T) { _, s := newSession(t); assert.Equal(t, 1, s.Window()) },
		"Session.Snapshot": func(t *testing.T) {
			_, s := newSession(t)
			assert.Equal(t, t0, s.Snapshot().WindowStartedAt)
			assert.Equal(t, watchdog.Snapshot{}, (*watchdog.Session)(nil).Snapshot())
		},
		"Session.Writer": func(t *testing.T) {
			_, s := newSession(t)
			_, err := s.Writer(0, nil).Write([]byte("x"))
			require.NoError(t, err)
		},
		"Step": func(t *testing.T) { watchdog.Step(nilCtx, "")() },
		"VerdictError.Error": func(t *testing.T) {
			assert.NotEmpty(t, (&watchdog.VerdictError{}).Error())
		},
		"VerdictError.Resumable":      func(t *testing.T) { (&watchdog.VerdictError{}).Resumable() },
		"VerdictError.StopReasonCode": func(t *testing.T) { (&watchdog.VerdictError{}).StopReasonCode() },
		"VerdictError.Unwrap":         func(t *testing.T) { (&watchdog.VerdictError{}).Unwrap() },
		"Watchdog.Check": func(t *testing.T) {
			w, _ := newSession(t)
			invalid(t, w.Check(nilCtx))
		},
		"Watchdog.Close": func(t *testing.T) {
			w, _ := newSession(t)
			require.NoError(t, w.Close(nilCtx))
		},
		"Watchdog.NextDeadline": func(t *testing.T) { w, _ := newSession(t); w.NextDeadline() },
		"Watchdog.Resume": func(t *testing.T) {
			w, _ := newSession(t)
			_, err := w.Resume(nilCtx, "", watchdog.Policy{})
			invalid(t, err)
		},
		"Watchdog.Run": func(t *testing.T) {
			w, _ := newSession(t)
			_, err := w.Run(nilCtx, "", watchdog.Policy{}, nil)
			invalid(t, err)
		},
		"Watchdog.Start": func(t *testing.T) {
			w, _ := newSession(t)
			_, err := w.Start(nilCtx, "", time.Time{}, watchdog.Policy{})
			invalid(t, err)
		},
		"Watchdog.Stats": func(t *testing.T) { w, _ := newSession(t); assert.Equal(t, 1, w.Stats().Sessions) },
		"Watchdog.SessionsByRule": func(t *testing.T) {
			w, _ := newSession(t)
			assert.Equal(t, map[watchdog.RuleMode]int{{Rule: "wall_clock", Mode: watchdog.ModeAct}: 1}, w.SessionsByRule())
		},
		"Watchdog.Store": func(t *testing.T) { w, _ := newSession(t); assert.NotNil(t, w.Store()) },
		"WithAction":     func(t *testing.T) { assert.NotNil(t, watchdog.WithAction(nil)) },
		"WithClock":      func(t *testing.T) { assert.NotNil(t, watchdog.WithClock(nil)) },
		"WithEventIDPrefix": func(t *testing.T) {
			assert.NotNil(t, watchdog.WithEventIDPrefix(""))
		},
		"WithLogger": func(t *testing.T) { assert.NotNil(t, watchdog.WithLogger(nil)) },
		"WithCallRecords": func(t *testing.T) {
			w := watchdog.New(watchdog.WithCallRecords(0), watchdog.WithCallRecords(-1)) // off
			require.NoError(t, w.Close(context.Background()))
		},
		"WithSlog":     func(t *testing.T) { assert.NotNil(t, watchdog.WithSlog(nil)) },
		"WithObserver": func(t *testing.T) { assert.NotNil(t, watchdog.WithObserver(watchdog.Observer{})) },
		"WithAdoption": func(t *testing.T) { assert.NotNil(t, watchdog.WithAdoption()) },
		"WithCheckpoints": func(t *testing.T) {
			w := watchdog.New(watchdog.WithCheckpoints(0), watchdog.WithCheckpoints(-time.Second)) // off, the minimum
			require.NoError(t, w.Close(context.Background()))
		},
		"WithLease": func(t *testing.T) {
			w := watchdog.New(watchdog.WithLease(0), watchdog.WithLease(-time.Second)) // the default, the minimum
			require.NoError(t, w.Close(context.Background()))
		},
		"WithRetryBackoff": func(t *testing.T) { assert.NotNil(t, watchdog.WithRetryBackoff(0, 0)) },
		"WithStore":        func(t *testing.T) { assert.NotNil(t, watchdog.WithStore(nil)) },
		"Within": func(t *testing.T) {
			invalid(t, watchdog.Within(nilCtx, "", "", 0, nil))
		},
	}
	for name, f := range platformZeroValueCases(invalid) {
		cases[name] = f
	}
	for _, name := range exportedFuncs(t) {
		t.Run(name, func(t *testing.T) {
			f, ok := cases[name]
			require.True(t, ok, "no zero-value case for %s: add one", name)
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s panicked on zero values: %v", name, p)
				}
			}()
			f(t)
		})
	}
}
