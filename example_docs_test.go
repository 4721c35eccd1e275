package watchdog_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docPages are the pages whose code samples and links the tests below check.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md", "ARCHITECTURE.md"}, pages...)
}

// excerptMark names the file a fenced block of a page quotes, on the line
// before the fence: <!-- excerpt: example_orchestrator_test.go -->.
var excerptMark = regexp.MustCompile(`^<!-- excerpt: (\S+) -->$`)

// Every Go sample of the README, and every sample of a page marked as an
// excerpt, quotes a file that builds and runs (an Example or a test): its
// lines appear in that file in order, a line "// ..." standing for lines
// left out. Indentation is not compared.
func TestExampleREADMESnippetsAreExcerpts(t *testing.T) {
	for _, page := range docPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			fence, ok := strings.CutPrefix(lines[i], "```")
			if !ok || fence == "" {
				continue
			}
			start := i
			var block []string
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				block = append(block, lines[i])
			}
			var src string
			if start > 0 {
				if m := excerptMark.FindStringSubmatch(lines[start-1]); m != nil {
					src = m[1]
				}
			}
			if src == "" {
				if page == "README.md" && fence == "go" {
					t.Errorf("%s:%d: a Go sample without <!-- excerpt: FILE --> on the line before it", page, start+1)
				}
				continue
			}
			if err := isExcerpt(block, src); err != "" {
				t.Errorf("%s:%d: the sample is not an excerpt of %s: %s", page, start+1, src, err)
			}
		}
	}
}

// isExcerpt says why block is not an excerpt of the file src ("" if it is).
func isExcerpt(block []string, src string) string {
	b, err := os.ReadFile(src)
	if err != nil {
		return err.Error()
	}
	file := strings.Split(string(b), "\n")
	for i := range file {
		file[i] = strings.TrimSpace(file[i])
	}
	at := 0 // the file's next line to match
	var chunk []string
	flush := func() string {
		if len(chunk) == 0 {
			return ""
		}
		for j := at; j+len(chunk) <= len(file); j++ {
			if slicesEqual(file[j:j+len(chunk)], chunk) {
				at, chunk = j+len(chunk), nil
				return ""
			}
		}
		return "no run of lines in it, after the lines matched before, reads:\n" + strings.Join(chunk, "\n")
	}
	for _, l := range block {
		l = strings.TrimSpace(l)
		if l == "// ..." {
			if err := flush(); err != "" {
				return err
			}
			continue
		}
		chunk = append(chunk, l)
	}
	return flush()
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the pages leads to a file or directory of the
// repository, and its #anchor, if any, to a heading of the page it names.
func TestExampleDocsLinksResolve(t *testing.T) {
	if _, err := os.Stat(".git"); err != nil {
		t.Skip("not a checkout of the repository: the nested modules' files the pages link to are not here")
	}
	for _, page := range docPages(t) {
		f, err := os.Open(page)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		inFence := false
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(line, "```") {
				inFence = !inFence
			}
			if inFence {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				if path == "" {
					path = page
				} else {
					path = filepath.Join(filepath.Dir(page), path)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %s: %v", page, n, target, err)
					continue
				}
				if anchor != "" && !hasAnchor(t, path, anchor) {
					t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", page, n, target, path, anchor)
				}
			}
		}
		f.Close()
	}
}

// hasAnchor reports whether the Markdown file path has a heading whose
// GitHub anchor is anchor.
func hasAnchor(t *testing.T, path, anchor string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		if slug(strings.TrimLeft(line, "# ")) == anchor {
			return true
		}
	}
	return false
}

// slug is GitHub's anchor of a heading: lower case, spaces to hyphens,
// punctuation other than hyphens and underscores dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
