module github.com/sessionwatchdog/watchdog/cmd/watchdog

go 1.25

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/sessionwatchdog/watchdog v0.0.0
)

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sys v0.13.0 // indirect
)

replace github.com/sessionwatchdog/watchdog => ../..
