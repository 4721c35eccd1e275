package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A release, published into a file-system proxy from a clone of this
// repository, tags every module at commits whose go.mod files have no
// replace directive, and `go install .../cmd/sessionwatchdog@VERSION`
// accepts it and builds a binary that runs; the branch then goes back to
// the development go.mod files. It builds every module's dependency graph
// from the module proxy, so CI runs it on its own (.ci/run), with
// WATCHDOG_RELEASE_TEST=1.
func TestReleaseTagsModulesThatGoInstallAccepts(t *testing.T) {
	if os.Getenv("WATCHDOG_RELEASE_TEST") != "1" {
		t.Skip("SKIPPING the release check: set WATCHDOG_RELEASE_TEST=1 (.ci/run does)")
	}
	const version = "v0.1.0"
	top := strings.TrimSpace(run(t, ".", nil, "git", "rev-parse", "--show-toplevel"))
	repo := filepath.Join(t.TempDir(), "repo")
	run(t, ".", nil, "git", "clone", "-q", top, repo)
	for _, kv := range [][2]string{{"user.email", "release@example.com"}, {"user.name", "release"}, {"commit.gpgsign", "false"}, {"tag.gpgsign", "false"}} {
		run(t, repo, nil, "git", "config", kv[0], kv[1])
	}
	// A module cache of its own, so that no earlier run's v0.1.0 is
	// reused, filled from the shared one's downloads (a module proxy's
	// layout) before the network.
	shared := strings.TrimSpace(run(t, ".", nil, "go", "env", "GOMODCACHE"))
	goproxy := strings.TrimSpace(run(t, ".", nil, "go", "env", "GOPROXY"))
	t.Setenv("GOMODCACHE", filepath.Join(t.TempDir(), "modcache"))
	t.Setenv("GOPROXY", "file://"+filepath.ToSlash(filepath.Join(shared, "cache", "download"))+","+goproxy)
	t.Setenv("GOFLAGS", "-modcacherw") // so that the test's temporary directory can be removed
	proxy := filepath.Join(t.TempDir(), "proxy")
	r, err := newRelease(repo, version, "", proxy)
	if err != nil {
		t.Fatal(err)
	}
	r.log = io.Discard
	if err := r.run(); err != nil {
		t.Fatal(err)
	}

	for _, m := range r.mods {
		tag := m.tag(version)
		gomod := run(t, repo, nil, "git", "show", tag+":"+strings.TrimPrefix(m.dir+"/go.mod", "./"))
		if strings.Contains(gomod, "\nreplace") {
			t.Errorf("%s: the tagged go.mod has a replace directive:\n%s", tag, gomod)
		}
		for _, p := range m.replaced {
			if !strings.Contains(gomod, p+" "+version) {
				t.Errorf("%s: the tagged go.mod does not require %s %s:\n%s", tag, p, version, gomod)
			}
		}
	}
	if !strings.Contains(run(t, repo, nil, "git", "show", "HEAD:cmd/sessionwatchdog/go.mod"), "\nreplace") {
		t.Error("after the release, the branch's go.mod files should point at the checkout again")
	}

	gobin := t.TempDir()
	env := append(os.Environ(), "GOBIN="+gobin, "GOWORK=off", "GOFLAGS=-mod=mod -modcacherw", "GOPROXY="+r.proxy,
		"GONOSUMDB=github.com/sessionwatchdog/watchdog", "GOPRIVATE=", "GONOPROXY=")
	run(t, t.TempDir(), env, "go", "install", "github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog@"+version)
	if out := run(t, ".", nil, filepath.Join(gobin, "sessionwatchdog"), "version"); !strings.Contains(out, "sessionwatchdog "+version+", library "+version) {
		t.Errorf("the installed command's version: %s", out)
	}
}

// Bad input is refused before anything changes.
func TestReleaseRefusesBadInput(t *testing.T) {
	for _, v := range []string{"", "0.1.0", "v0.1", "v01.2.3", "v0.1.0-rc1"} {
		if _, err := newRelease(".", v, "", t.TempDir()); err == nil || !strings.Contains(err.Error(), "vMAJOR.MINOR.PATCH") {
			t.Errorf("version %q: got %v", v, err)
		}
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...) //watchdog:unbounded a test's local command
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}
