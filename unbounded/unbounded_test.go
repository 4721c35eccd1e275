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

// tools["search"](context.Background(), q), a func-typed parameter, field
// or variable, a function literal called at once: calls through function
// values are reported as calls of named functions are
// (testdata/src/funcvalues).
func TestTheAnalyzerReportsCallsThroughFunctionValues(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), unbounded.Analyzer, "funcvalues")
}

// context.WithTimeout(context.Background(), d) is reported where the
// function has a context, and not where only a watched session is in
// scope: what the package doc and docs/deadlines.md say
// (testdata/src/derived).
func TestAContextDerivedFromBackgroundIsReportedWhereTheFunctionHasAContext(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), unbounded.Analyzer, "derived")
}
