package unbounded_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/sessionwatchdog/watchdog/unbounded"
)

// Each reported call, each call that is not, and the directive that
// accepts one with a reason, are in testdata/src/a/a.go (want comments).
func TestTheAnalyzerReportsCallsNoContextCanBound(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), unbounded.Analyzer, "a")
}
