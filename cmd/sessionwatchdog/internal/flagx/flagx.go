// Package flagx holds the flag.Value types the sessionwatchdog commands
// share.
package flagx

import "strings"

// List is a repeatable flag whose values may also be comma-separated; empty
// values are dropped.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set adds v's comma-separated values.
func (l *List) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}
