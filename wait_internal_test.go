package watchdog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A wait uses the server-supplied timeout when it is positive and 30
// minutes when the server supplied none (0) or a negative one.
func TestAWaitUsesTheServerTimeoutWhenPositiveElseThirtyMinutes(t *testing.T) {
	for _, tt := range []struct {
		server, want time.Duration
	}{
		{90 * time.Second, 90 * time.Second},
		{0, 30 * time.Minute},
		{-5 * time.Second, 30 * time.Minute},
	} {
		assert.Equal(t, tt.want, waitTimeout(tt.server), "server %v", tt.server)
	}
}
