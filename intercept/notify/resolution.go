package notify

import (
	"encoding/json"
	"slices"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
)

func (s *Sender) detected(r DriftReport) Result {
	sp := &r.Spec
	if sp.ID == "" {
		sp.ID = ID(sp.Parent.Ref(), sp.Child.Ref(), sp.Changes)
	}
	key := pairKey(sp.Parent.Ref(), sp.Child.Ref())
	gen := sp.Parent.Generation

	// Phase 1, under the lock: what is to do? Cheap.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.dropAll(PhaseDetected)
	}
	var superseded []*openDrift
	need := true
	if p := s.open.get(key); p != nil {
		for _, od := range p.drifts {
			if gen > 0 && od.parentGen > 0 && od.parentGen < gen {
				superseded = append(superseded, od)
			} else if od.id == sp.ID {
				need = s.undelivered(od)
			}
		}
	}
	s.mu.Unlock()
	if !need && len(superseded) == 0 {
		s.m.deduplicated.WithLabelValues(string(PhaseDetected)).Inc()
		return Deduplicated
	}

	// Serialize outside the lock.
	var body []byte
	if need {
		var err error
		if body, err = json.Marshal(r); err != nil {
			s.log.Error("cannot serialize DriftReport", zap.String("id", sp.ID), zap.Error(err))
			return Ignored
		}
	}
	res := s.resolvedBodies(superseded, DriftReport{Spec: DriftReportSpec{Parent: sp.Parent, Reason: ReasonParentChanged}})

	// Phase 2, under the lock: open and queue. Pushes do not block.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.dropAllLocked(PhaseDetected)
	}
	for i, od := range superseded {
		s.closeLocked(od, res[i])
	}
	if !need {
		s.m.deduplicated.WithLabelValues(string(PhaseDetected)).Inc()
		return Deduplicated
	}
	var od *openDrift
	if p := s.open.get(key); p != nil {
		od = p.find(sp.ID)
	}
	if od == nil {
		light := *sp
		light.OldObject, light.NewObject = runtime.RawExtension{}, runtime.RawExtension{}
		light.Changes, light.Request.Groups = slices.Clone(light.Changes), slices.Clone(light.Request.Groups)
		od = &openDrift{id: sp.ID, key: key, parentGen: gen, spec: light, state: make([]deliveryState, len(s.targets))}
		s.open.add(od)
	}
	result := Deduplicated
	for _, t := range s.targets {
		if od.state[t.idx] != stateNone {
			continue
		}
		if s.pushLocked(t, &job{phase: PhaseDetected, body: body, drift: od}) {
			od.state[t.idx] = statePending
			result = Queued
		} else if result == Deduplicated {
			result = Dropped
		}
	}
	if result == Deduplicated {
		s.m.deduplicated.WithLabelValues(string(PhaseDetected)).Inc()
	}
	return result
}

// undelivered: od is not queued or delivered at some URL. Under s.mu.
func (s *Sender) undelivered(od *openDrift) bool {
	for _, st := range od.state {
		if st == stateNone {
			return true
		}
	}
	return false
}

func (s *Sender) resolved(r DriftReport) Result {
	key := pairKey(r.Spec.Parent.Ref(), r.Spec.Child.Ref())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.dropAll(PhaseResolved)
	}
	var ods []*openDrift
	if p := s.open.pairs[key]; p != nil {
		for _, od := range p.drifts {
			if r.Spec.ID == "" || od.id == r.Spec.ID {
				ods = append(ods, od)
			}
		}
	}
	s.mu.Unlock()
	if len(ods) == 0 {
		return NotOpen
	}

	bodies := s.resolvedBodies(ods, r)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.dropAllLocked(PhaseResolved)
	}
	result := NotOpen
	for i, od := range ods {
		switch s.closeLocked(od, bodies[i]) {
		case Queued:
			result = Queued
		case Dropped:
			if result == NotOpen {
				result = Dropped
			}
		}
	}
	return result
}

// resolvedBodies serializes the Resolved reports closing ods: the id, the
// changes and (unless r sets them) the parent, child and request of each
// Detected report; the reason, the objects and the rest from r.
func (s *Sender) resolvedBodies(ods []*openDrift, r DriftReport) [][]byte {
	if len(ods) == 0 {
		return nil
	}
	// Serialize the objects once for all.
	if err := rawify(&r.Spec); err != nil {
		s.log.Error("cannot serialize the objects of a Resolved DriftReport", zap.Error(err))
		r.Spec.OldObject, r.Spec.NewObject = runtime.RawExtension{}, runtime.RawExtension{}
	}
	out := make([][]byte, len(ods))
	for i, od := range ods {
		sp := od.spec // copy
		sp.Phase, sp.Reason = PhaseResolved, r.Spec.Reason
		if r.Spec.Parent.Kind != "" {
			sp.Parent = r.Spec.Parent
		}
		if r.Spec.Child.Kind != "" {
			sp.Child = r.Spec.Child
		}
		if r.Spec.Request.User != "" {
			sp.Request = r.Spec.Request
		}
		sp.OldObject, sp.NewObject = r.Spec.OldObject, r.Spec.NewObject
		b, err := json.Marshal(DriftReport{APIVersion: APIVersion, Kind: Kind, Spec: sp})
		if err != nil { // cannot happen: the objects are raw JSON by now
			s.log.Error("cannot serialize DriftReport", zap.String("id", sp.ID), zap.Error(err))
		}
		out[i] = b
	}
	return out
}

// rawify turns the objects of sp into raw JSON.
func rawify(sp *DriftReportSpec) error {
	for _, e := range [...]*runtime.RawExtension{&sp.OldObject, &sp.NewObject} {
		if e.Raw != nil || e.Object == nil {
			continue
		}
		b, err := json.Marshal(e.Object)
		if err != nil {
			return err
		}
		e.Raw, e.Object = b, nil
	}
	return nil
}

// closeLocked closes od and queues its Resolved report for every URL the
// Detected report is queued for or was delivered to. Under s.mu.
func (s *Sender) closeLocked(od *openDrift, body []byte) Result {
	if !od.open || body == nil {
		return NotOpen
	}
	s.open.remove(od)
	result := NotOpen
	for _, t := range s.targets {
		if od.state[t.idx] == stateNone {
			continue
		}
		if s.pushLocked(t, &job{phase: PhaseResolved, body: body, drift: od}) {
			result = Queued
		} else if result == NotOpen {
			result = Dropped
		}
	}
	return result
}
