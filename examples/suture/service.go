package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/thejerf/suture/v4"

	"github.com/sessionwatchdog/watchdog"
)

// Service is a suture.Service that runs the windows of one watchdog
// session, one window per call of Serve. The watchdog decides when a window
// ends and records why; suture decides when to run the next one, with its
// failure threshold and backoff. The two do not overlap: the watchdog never
// restarts anything, and suture never sees a stall, only a Serve that
// returned.
//
// Each Serve resumes the session (Watchdog.Resume): after a verdict the
// window has ended, so the resume opens the next window under Policy; after
// a process restart the last window is still open (Close records no
// terminal event), so the resume continues it with its original start and
// recorded policy. For an id the store has never seen, Serve starts the
// session with Watchdog.Run.
//
// Serve returns an error wrapping suture.ErrDoNotRestart, so that suture
// removes the service, when restarting cannot help: the loop completed,
// the session is past its ceiling (Result.Resumable is false), the Watchdog
// is closed, the Service is misconfigured, or the session is already
// watched (by another Service of the same Watchdog, or by a fleet member).
// It returns the window's error as is (a *watchdog.VerdictError, the
// loop's own error) when the next window should run, and suture restarts
// it.
//
// A Service whose session completed runs it again in a new window when a
// new Service serves the same id (in a new process, say): give each job its
// own id. The zero Service is misconfigured: Serve returns at once. Serve
// may be called again after it returned, as suture does; a Service must not
// be served by two supervisors at once.
type Service struct {
	// W is the Watchdog that watches the session. Required.
	W *watchdog.Watchdog
	// ID is the session id. Required.
	ID string
	// Policy is the policy of every window Serve opens (a window continued
	// after a process restart keeps the policy recorded for it). The zero
	// Policy means the defaults.
	Policy watchdog.Policy
	// Loop is the pipeline loop run in each window. It must return once its
	// context is done. Required.
	Loop func(ctx context.Context) error
	// Ended, if set, is called on Serve's goroutine with the Result and the
	// error of each window that ran, before Serve returns.
	Ended func(watchdog.Result, error)
}

// String names the service in suture's log events.
func (s *Service) String() string {
	if s == nil {
		return "watchdog session <nil>"
	}
	return fmt.Sprintf("watchdog session %q", s.ID)
}

// Serve runs one window of the session under the Watchdog and returns how
// it ended (see Service). ctx is suture's: when it ends, the window ends
// with stop reason "canceled" and stays resumable.
func (s *Service) Serve(ctx context.Context) error {
	switch {
	case s == nil:
		return fmt.Errorf("watchdog session: nil Service: %w", suture.ErrDoNotRestart)
	case s.W == nil || s.ID == "" || s.Loop == nil:
		return fmt.Errorf("%v: W, ID and Loop are required: %w", s, suture.ErrDoNotRestart)
	}
	var (
		res watchdog.Result
		err error
	)
	sess, rerr := s.W.Resume(ctx, s.ID, s.Policy)
	switch {
	case errors.Is(rerr, watchdog.ErrUnknownSession):
		res, err = s.W.Run(ctx, s.ID, s.Policy, s.Loop) // window 1 of a new session
		if res.Window == 0 {                            // Start failed: nothing ran
			return s.notOpened(err)
		}
	case rerr != nil:
		return s.notOpened(rerr)
	default:
		res, err = sess.Run(s.Loop)
	}
	if s.Ended != nil {
		s.Ended(res, err)
	}
	switch {
	case ctx.Err() != nil: // suture is stopping this service: it ignores the error
		return err
	case err == nil: // the loop completed
		return fmt.Errorf("%v completed in window %d: %w", s, res.Window, suture.ErrDoNotRestart)
	case errors.Is(err, watchdog.ErrClosed):
		return fmt.Errorf("%v: %w: %w", s, err, suture.ErrDoNotRestart)
	case !res.Resumable: // past the session ceiling: a new window would be cancelled at once
		return fmt.Errorf("%v: %w: %w", s, err, suture.ErrDoNotRestart)
	default: // a verdict or the loop's own error: suture runs the next window
		return err
	}
}

// notOpened maps an error that kept Serve from opening a window: restart
// only when the cause may pass (a store that failed to load, say).
func (s *Service) notOpened(err error) error {
	if errors.Is(err, watchdog.ErrClosed) || errors.Is(err, watchdog.ErrAlreadyWatched) ||
		errors.Is(err, watchdog.ErrInvalidArgument) || errors.Is(err, watchdog.ErrInvalidPolicy) {
		return fmt.Errorf("%v: %w: %w", s, err, suture.ErrDoNotRestart)
	}
	return fmt.Errorf("%v: %w", s, err)
}
