// Command release tags every Go module of the repository at one version,
// at commits whose go.mod files carry no replace directive, so that
// `go install github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog@VERSION`
// (and `go get` of any module) accepts them.
//
// In a checkout the nested modules point at their neighbours with replace
// directives (`replace github.com/sessionwatchdog/watchdog => ../..`), which
// `go install module@version` refuses. release works through the modules in
// the order they depend on each other: it tags those that depend on no
// other module of the repository (the root first) at HEAD and publishes
// them; then, for each next layer, it drops the replace directives, requires
// VERSION of the neighbours, runs `go mod tidy` against the published
// neighbours (which writes their checksums to go.sum), commits and tags
// that layer. At the end it commits the development go.mod files back.
//
// Usage:
//
//	go run ./scripts/release -push origin v0.1.0
//	go run ./scripts/release -local-proxy DIR v0.1.0
//
// -push REMOTE pushes each layer's tags (and finally the branch) and waits
// until the Go module proxy serves them before the next layer.
// -local-proxy DIR publishes the modules into a file-system module proxy
// instead (GOPROXY=file://DIR), to check a release without publishing it:
// release_test.go does that, then installs the command from it.
//
// The working tree must be clean, VERSION must be vMAJOR.MINOR.PATCH, and
// CHANGELOG.md must have its section "## [MAJOR.MINOR.PATCH]"; a heading
// that says "not yet tagged" gets the day's date in the first release
// commit.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	push := flag.String("push", "", "push the tags to this git `remote` and wait for the Go module proxy")
	local := flag.String("local-proxy", "", "publish into this file-system module proxy `dir` instead of pushing")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./scripts/release (-push REMOTE | -local-proxy DIR) VERSION")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || (*push == "") == (*local == "") {
		flag.Usage()
		os.Exit(2)
	}
	r, err := newRelease(".", flag.Arg(0), *push, *local)
	if err == nil {
		err = r.run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
