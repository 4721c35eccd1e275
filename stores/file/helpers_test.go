package file_test

import "github.com/sessionwatchdog/watchdog/internal/testutil"

// The helpers shared with the root package's tests (internal/testutil).
var (
	t0          = testutil.T0
	newMock     = testutil.NewMock
	newWatchdog = testutil.NewWatchdog
	advance     = testutil.Advance
	load        = testutil.Load
	kinds       = testutil.Kinds
	countKind   = testutil.CountKind
)
