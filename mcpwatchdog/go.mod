module github.com/sessionwatchdog/watchdog/mcpwatchdog

go 1.25.0

require (
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/sessionwatchdog/watchdog v0.0.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/google/jsonschema-go v0.4.3 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/segmentio/encoding v0.5.4 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/oauth2 v0.35.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.41.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)

replace github.com/sessionwatchdog/watchdog => ../
