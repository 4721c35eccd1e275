module github.com/sessionwatchdog/watchdog/examples/suture

go 1.25.0

replace github.com/sessionwatchdog/watchdog => ../..

require (
	github.com/sessionwatchdog/watchdog v0.0.0-00010101000000-000000000000
	github.com/thejerf/suture/v4 v4.0.6
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sys v0.13.0 // indirect
)
