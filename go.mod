module github.com/sessionwatchdog/watchdog

go 1.25

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/fsnotify/fsnotify v1.10.1
	github.com/stretchr/testify v1.12.1
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.13.0
)

require (
	go.uber.org/multierr v1.10.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
