package server

import (
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// StoreOf returns the store a running server reads and writes, so a test
// can ask it how it runs.
func StoreOf(s *Server) store.Store { return s.st }

// IdleAsides is how many kept goroutines wait for a worker stream's next
// piece of deep work.
func IdleAsides(s *Server) int { return s.asides.idleCount() }

// RefusedCallsOpen is how many refused calls still hold their context.
func RefusedCallsOpen(s *Server) int64 { return s.refusedOpen.Load() }

// AppliedFlowLimits is what flow limits of namespace ns the server applies.
func AppliedFlowLimits(s *Server, ns string) []store.FlowLimit { return s.eng.AppliedFlowLimits(ns) }

// WriterIdle returns a channel closed once the stream of worker id runs no
// writer goroutine; false when the worker is not connected.
func WriterIdle(s *Server, id uint64) (<-chan struct{}, bool) {
	s.connsMu.Lock()
	c, ok := s.conns[registry.WorkerID(id)]
	s.connsMu.Unlock()
	if !ok {
		return nil, false
	}
	return c.writerIdle(), true
}
