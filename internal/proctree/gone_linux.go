//go:build linux

package proctree

// Gone reports whether every process of a command's tree is gone: none of
// procs (found before the kill) and no process of group pgid or below its
// leader is alive. Zombies count as gone.
func Gone(pgid int, procs []Proc) bool {
	for _, p := range procs {
		if p.Alive() {
			return false
		}
	}
	return len(Tree(pgid, pgid)) == 0 // Tree lists live processes only
}
