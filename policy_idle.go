package watchdog

import "time"

// IdleAfter returns the Policy that stops a session after d without work on
// any channel, the other fields at their defaults: IdleWindow d, EvidenceTTL
// d (evidence on any channel, not only stdout, counts as work for d), and
// two settle checks d/10 apart (at least 1 ns). A session with no work (no
// evidence on any channel, no call with a deadline in flight) is stopped
// IdleAfter's d plus d/10 after its last work at the latest. Set other
// fields on the result as on any Policy (p := IdleAfter(d);
// p.WallClock = time.Hour). A zero d turns the idle rule off, as a zero
// IdleWindow does; a negative one is refused by Validate (and so by Start
// and Resume). The plain fields keep their own defaults: a Policy with only
// IdleWindow set defers to evidence up to 30 s old and settles over three
// checks 10 s apart.
func IdleAfter(d time.Duration) Policy {
	return Policy{IdleWindow: d, EvidenceTTL: d, SettleChecks: 2, SettleInterval: max(d/10, time.Nanosecond)}
}
