package server

import "github.com/aion-run/aion/internal/store"

// StoreOf returns the store a running server reads and writes, so a test
// can ask it how it runs.
func StoreOf(s *Server) store.Store { return s.st }

// RefusedCallsOpen is how many refused calls still hold their context.
func RefusedCallsOpen(s *Server) int64 { return s.refusedOpen.Load() }

// AppliedFlowLimits is what flow limits of namespace ns the server applies.
func AppliedFlowLimits(s *Server, ns string) []store.FlowLimit { return s.eng.AppliedFlowLimits(ns) }
