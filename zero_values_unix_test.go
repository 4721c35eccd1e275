//go:build unix

package watchdog_test

import (
	"context"
	"testing"

	"github.com/sessionwatchdog/watchdog"
)

// platformZeroValueCases are the zero-value cases of the Unix-only API.
func platformZeroValueCases(invalid func(*testing.T, error)) map[string]func(*testing.T) {
	var nilCtx context.Context
	return map[string]func(*testing.T){
		"Command": func(t *testing.T) { invalid(t, watchdog.Command(nilCtx, 0, "").Start()) },
	}
}
