// Package policyview gives the module's other packages (whatif) the root
// package's resolution of a Policy, without the root exporting it: the
// root package sets these in its init, so they are set in any program
// that imports it.
package policyview

import "github.com/sessionwatchdog/watchdog/internal/decide"

var (
	// Limits resolves a watchdog.Policy (defaults applied) as the Watchdog does.
	Limits func(policy any) decide.Limits
	// RuleMode is the mode ("act" or "shadow") of a rule under a watchdog.Policy.
	RuleMode func(policy any, rule string) string
	// Clone deep-copies a watchdog.Policy.
	Clone func(policy any) any
	// BuiltinChannels are the built-in evidence channels' names, in order.
	BuiltinChannels []string
	// RuleByName and RuleNames map the built-in rules' names to decide's rules and back.
	RuleByName map[string]decide.Rule
	RuleNames  []string
)
