//go:build !unix

package watchdog_test

import "testing"

func platformZeroValueCases(func(*testing.T, error)) map[string]func(*testing.T) { return nil }
