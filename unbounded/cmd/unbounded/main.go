// Command unbounded reports blocking calls that no context can bound (see
// package github.com/sessionwatchdog/watchdog/unbounded):
//
//	unbounded ./...
//	go vet -vettool=$(command -v unbounded) ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/sessionwatchdog/watchdog/unbounded"
)

func main() { singlechecker.Main(unbounded.Analyzer) }
