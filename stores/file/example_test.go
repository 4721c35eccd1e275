package file_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// A Store keeps a session's events across restarts: a later process reopens
// the file and finds them, with their seq.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "watchdog-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "events.jsonl")
	ctx := context.Background()

	store, err := file.Open(path) // fsync on every append
	if err != nil {
		panic(err)
	}
	w := watchdog.New(watchdog.WithStore(store))
	res, _ := w.Run(ctx, "nightly-build", watchdog.Policy{}, func(ctx context.Context) error { return nil })
	_ = w.Close(ctx) // records every pending event
	_ = store.Close()
	fmt.Println(res.StopReasonCode)

	// The next process:
	store, err = file.Open(path)
	if err != nil {
		panic(err) // a *file.CorruptError names the bad line
	}
	defer store.Close()
	fmt.Println("torn tail repaired:", store.TornTail() != nil)
	evs, _ := store.Load(ctx, "nightly-build")
	for _, e := range evs {
		fmt.Println(e.Seq, e.Kind)
	}
	// Output:
	// completed
	// torn tail repaired: false
	// 1 runtime.watchdog.start
	// 2 runtime.watchdog.stop
}
