package scheduler

// SetOnPass makes the loop call f as each pass begins (true) and ends;
// call it before Start.
func SetOnPass(s *Scheduler, f func(begin bool)) { s.onPass = f }

// Poke wakes the loop.
func Poke(s *Scheduler) { s.poke() }
