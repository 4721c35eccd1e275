package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// module is one Go module of the repository.
type module struct {
	dir      string   // relative to the repository's root, slash-separated; "." for the root
	path     string   // its module path
	replaced []string // module paths its go.mod replaces with a directory of the repository
}

// tag is the module's tag for version: "v1.2.3", or "dir/v1.2.3" for a
// nested module.
func (m *module) tag(version string) string {
	if m.dir == "." {
		return version
	}
	return m.dir + "/" + version
}

type release struct {
	root    string // the repository's root, absolute
	version string
	push    string // the git remote to push to; "" with local
	local   string // the file-system proxy to publish into, absolute; "" with push
	proxy   string // GOPROXY for go mod tidy and for waiting
	start   string // HEAD when the release began
	mods    []*module
	log     io.Writer
}

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// newRelease checks that a release of version can start in the repository
// that holds dir, and reads its modules.
func newRelease(dir, version, push, local string) (*release, error) {
	if !semver.MatchString(version) {
		return nil, fmt.Errorf("version %q is not vMAJOR.MINOR.PATCH (for example v0.1.0)", version)
	}
	r := &release{version: version, push: push, log: os.Stdout}
	top, err := r.output(dir, nil, "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	r.root = strings.TrimSpace(top)
	if st, err := r.git("status", "--porcelain"); err != nil {
		return nil, err
	} else if strings.TrimSpace(st) != "" {
		return nil, fmt.Errorf("the working tree is not clean: commit or stash first:\n%s", st)
	}
	head, err := r.git("rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	r.start = strings.TrimSpace(head)
	cl, err := os.ReadFile(filepath.Join(r.root, "CHANGELOG.md"))
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(cl, []byte("## ["+version[1:]+"]")) {
		return nil, fmt.Errorf("CHANGELOG.md has no section \"## [%s]\": write what the release holds first", version[1:])
	}
	files, err := r.git("ls-files", "go.mod", "*/go.mod")
	if err != nil {
		return nil, err
	}
	for _, f := range strings.Fields(files) {
		m, err := r.readModule(path.Dir(f))
		if err != nil {
			return nil, err
		}
		if t, _ := r.git("tag", "--list", m.tag(version)); strings.TrimSpace(t) != "" {
			return nil, fmt.Errorf("tag %s exists already", m.tag(version))
		}
		r.mods = append(r.mods, m)
	}
	goproxy, err := r.output(r.root, nil, "go", "env", "GOPROXY")
	if err != nil {
		return nil, err
	}
	r.proxy = strings.TrimSpace(goproxy)
	if local != "" {
		if r.local, err = filepath.Abs(local); err != nil {
			return nil, err
		}
		r.proxy = "file://" + filepath.ToSlash(r.local) + "," + r.proxy
	}
	return r, nil
}

// readModule reads the module in dir: its path and its replace directives
// that point into the repository.
func (r *release) readModule(dir string) (*module, error) {
	out, err := r.output(filepath.Join(r.root, dir), nil, "go", "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var gm struct {
		Module  struct{ Path string }
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal([]byte(out), &gm); err != nil {
		return nil, fmt.Errorf("%s/go.mod: %w", dir, err)
	}
	m := &module{dir: dir, path: gm.Module.Path}
	for _, rp := range gm.Replace {
		if rp.New.Version == "" && !filepath.IsAbs(rp.New.Path) { // a directory of the checkout
			m.replaced = append(m.replaced, rp.Old.Path)
		}
	}
	return m, nil
}

// layers orders the modules so that each comes after the modules of the
// repository it requires.
func (r *release) layers() ([][]*module, error) {
	done := map[string]bool{}
	var out [][]*module
	for len(done) < len(r.mods) {
		var layer []*module
		for _, m := range r.mods {
			if !done[m.path] && !slices.ContainsFunc(m.replaced, func(p string) bool { return !done[p] }) {
				layer = append(layer, m)
			}
		}
		if len(layer) == 0 {
			return nil, errors.New("the modules' replace directives form a cycle, or point at a directory that holds no module of the repository")
		}
		for _, m := range layer {
			done[m.path] = true
		}
		out = append(out, layer)
	}
	return out, nil
}

func (r *release) run() error {
	layers, err := r.layers()
	if err != nil {
		return err
	}
	if err := r.dateChangelog(); err != nil {
		return err
	}
	var edited []string
	for i, layer := range layers {
		var dirs, tags []string
		for _, m := range layer {
			dirs, tags = append(dirs, m.dir), append(tags, m.tag(r.version))
			if i == 0 {
				continue // requires no module of the repository: as it is
			}
			args := []string{"mod", "edit"}
			for _, p := range m.replaced {
				args = append(args, "-dropreplace="+p, "-require="+p+"@"+r.version)
			}
			dir := filepath.Join(r.root, m.dir)
			if _, err := r.output(dir, nil, "go", args...); err != nil {
				return err
			}
			if _, err := r.output(dir, r.goEnv(), "go", "mod", "tidy"); err != nil {
				return err
			}
			for _, f := range []string{"go.mod", "go.sum"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					edited = append(edited, path.Join(m.dir, f))
				}
			}
		}
		if i > 0 {
			if _, err := r.git(append([]string{"add", "--"}, edited...)...); err != nil {
				return err
			}
			if _, err := r.git("commit", "-q", "-m", fmt.Sprintf("release %s: %s require %s of their neighbours, with no replace directive",
				r.version, strings.Join(dirs, ", "), r.version)); err != nil {
				return err
			}
		}
		for _, t := range tags {
			if _, err := r.git("tag", "-a", "-m", "release "+t, t); err != nil {
				return err
			}
		}
		fmt.Fprintf(r.log, "release: tagged %s\n", strings.Join(tags, " "))
		if err := r.publish(layer); err != nil {
			return err
		}
	}
	if len(edited) > 0 {
		if _, err := r.git(append([]string{"checkout", r.start, "--"}, edited...)...); err != nil {
			return err
		}
		if _, err := r.git("commit", "-q", "-m", fmt.Sprintf("after %s: go.mod files point at the checkout again (replace directives)", r.version)); err != nil {
			return err
		}
	}
	if r.push != "" {
		if _, err := r.git("push", r.push, "HEAD"); err != nil {
			return err
		}
	}
	return nil
}

// dateChangelog gives the release's CHANGELOG heading the day's date if it
// says it is not yet tagged, in a commit of its own.
func (r *release) dateChangelog() error {
	p := filepath.Join(r.root, "CHANGELOG.md")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	old := "## [" + r.version[1:] + "] - not yet tagged"
	if !bytes.Contains(b, []byte(old)) {
		return nil
	}
	b = bytes.Replace(b, []byte(old), []byte("## ["+r.version[1:]+"] - "+time.Now().UTC().Format(time.DateOnly)), 1)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return err
	}
	if _, err := r.git("commit", "-q", "-m", "release "+r.version+": CHANGELOG dated", "--", "CHANGELOG.md"); err != nil {
		return err
	}
	return nil
}

// publish makes the layer's tagged modules available to the next layer's
// go mod tidy: pushed and served by the proxy, or written to the local one.
func (r *release) publish(layer []*module) error {
	for _, m := range layer {
		if r.local != "" {
			if err := r.export(m); err != nil {
				return err
			}
			continue
		}
		if _, err := r.git("push", r.push, m.tag(r.version)); err != nil {
			return err
		}
	}
	if r.local != "" {
		return nil
	}
	tmp, err := os.MkdirTemp("", "release-wait-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, m := range layer {
		deadline := time.Now().Add(15 * time.Minute)
		for {
			_, err := r.output(tmp, r.goEnv(), "go", "list", "-m", m.path+"@"+r.version)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the Go module proxy does not serve %s@%s after 15 minutes: %w", m.path, r.version, err)
			}
			fmt.Fprintf(r.log, "release: waiting for the proxy to serve %s@%s\n", m.path, r.version)
			time.Sleep(15 * time.Second)
		}
	}
	return nil
}

// export writes module m, as tagged, into the file-system proxy: the
// files of its directory at the tag, less those of modules nested in it.
func (r *release) export(m *module) error {
	tag := m.tag(r.version)
	args := []string{"archive", "--format=tar", tag}
	if m.dir != "." {
		args = append(args, "--", m.dir)
	}
	ar, err := r.git(args...)
	if err != nil {
		return err
	}
	var nested []string
	for _, o := range r.mods {
		if o != m && (m.dir == "." || strings.HasPrefix(o.dir, m.dir+"/")) {
			nested = append(nested, o.dir+"/")
		}
	}
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	var gomod []byte
	tr := tar.NewReader(strings.NewReader(ar))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg || slices.ContainsFunc(nested, func(n string) bool { return strings.HasPrefix(h.Name, n) }) {
			continue
		}
		rel := h.Name
		if m.dir != "." {
			rel = strings.TrimPrefix(h.Name, m.dir+"/")
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if rel == "go.mod" {
			gomod = b
		}
		f, err := zw.Create(m.path + "@" + r.version + "/" + rel)
		if err != nil {
			return err
		}
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	when, err := r.git("log", "-1", "--format=%cI", tag)
	if err != nil {
		return err
	}
	info, _ := json.Marshal(struct{ Version, Time string }{r.version, strings.TrimSpace(when)})
	dir := filepath.Join(r.local, filepath.FromSlash(m.path), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range map[string][]byte{r.version + ".info": info, r.version + ".mod": gomod, r.version + ".zip": zb.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	list, err := os.OpenFile(filepath.Join(dir, "list"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(list, r.version)
	return errors.Join(err, list.Close())
}

// goEnv is the environment of the go commands that fetch the released
// modules: the release's proxy, no workspace, and no checksum database for
// the repository's own modules (the first fetch of a new version is what
// puts it there).
func (r *release) goEnv() []string {
	root := r.mods[0].path
	for _, m := range r.mods {
		if m.dir == "." {
			root = m.path
		}
	}
	return append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"), "GOPROXY="+r.proxy,
		"GONOSUMDB="+root, "GOPRIVATE=", "GONOPROXY=")
}

func (r *release) git(args ...string) (string, error) {
	return r.output(r.root, nil, "git", args...)
}

// output runs a command in dir (with env, if not nil) and returns its
// standard output; its error says what ran and what it printed.
func (r *release) output(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...) //watchdog:unbounded a release step, run by hand or by its test
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), dir, err, stderr.String())
	}
	return stdout.String(), nil
}
