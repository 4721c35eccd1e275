module github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog

go 1.25.0

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/jackc/pgx/v5 v5.12.0
	github.com/sessionwatchdog/watchdog v0.0.0
	github.com/sessionwatchdog/watchdog/stores/postgres v0.0.0
)

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.13.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

replace github.com/sessionwatchdog/watchdog => ../..

replace github.com/sessionwatchdog/watchdog/stores/postgres => ../../stores/postgres
