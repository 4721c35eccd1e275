package watchdog

import (
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
)

const continueAction = decide.Continue

// decideSession is the bridge from a Session to the pure decision.
func decideSession(s *Session, now time.Time) decide.Verdict {
	return decide.Decide(s.limits, decide.Snapshot{WindowStartedAt: s.windowStartedAt}, now)
}
