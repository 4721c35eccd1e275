package watchdog_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ARCHITECTURE.md matches the code: every package its table names exists,
// every internal package is named, and every Go name it quotes (`pass`,
// `record.Recorder.Run`, `Watchdog.mu`) is declared somewhere in the
// repository, so a rename or a deletion changes the page in the same
// commit.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile("ARCHITECTURE.md")
	require.NoError(t, err)
	doc := string(b)
	i := strings.Index(doc, "## Packages")
	require.GreaterOrEqual(t, i, 0, "ARCHITECTURE.md has a Packages section")

	named := map[string]bool{}
	quoted := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(doc[i:], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
			p := strings.TrimSuffix(m[1], "/...")
			named[p] = true
			if p == "watchdog" {
				continue
			}
			st, err := os.Stat(p)
			if assert.NoError(t, err, "ARCHITECTURE.md names package %s", p) {
				assert.True(t, st.IsDir(), "%s is a directory", p)
			}
		}
	}
	err = filepath.WalkDir("internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if goFiles, _ := filepath.Glob(filepath.Join(path, "*.go")); len(goFiles) > 0 {
			assert.True(t, named[filepath.ToSlash(path)], "ARCHITECTURE.md's package table does not name %s", path)
		}
		return nil
	})
	require.NoError(t, err)

	declared, std := declaredNames(t)
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	prose := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(doc, "") // the fences would pair the quotes wrongly
	for _, m := range quoted.FindAllStringSubmatch(prose, -1) {
		tok := m[1]
		if !ident.MatchString(tok) || strings.ToUpper(tok) == tok || strings.HasSuffix(tok, ".go") {
			continue // a path, a command line, an event kind, a verdict (CONTINUE), a file
		}
		parts := strings.Split(tok, ".")
		if len(parts) > 1 && std[parts[0]] {
			continue // the standard library's (errors.Is, time.Timer)
		}
		last := parts[len(parts)-1]
		assert.True(t, declared[last], "ARCHITECTURE.md quotes %s, but no %s is declared", tok, last)
	}
}

// declaredNames is every name declared in the repository's Go files:
// packages, funcs, methods, types, struct fields and interface methods,
// consts, vars; and std, the names of the standard library's packages they
// import.
func declaredNames(t *testing.T) (names, std map[string]bool) {
	names, std = map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil // not ours to judge here
		}
		names[f.Name.Name] = true
		for _, im := range f.Imports {
			if p := strings.Trim(im.Path.Value, `"`); !strings.Contains(strings.Split(p, "/")[0], ".") {
				std[p[strings.LastIndex(p, "/")+1:]] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				names[n.Name.Name] = true
			case *ast.TypeSpec:
				names[n.Name.Name] = true
			case *ast.ValueSpec:
				for _, id := range n.Names {
					names[id.Name] = true
				}
			case *ast.Field:
				for _, id := range n.Names {
					names[id.Name] = true
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return names, std
}
