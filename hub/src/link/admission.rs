//! Which TLS handshakes the link port keeps when its slots run out.
//!
//! A real spoke sends its ClientHello as soon as TCP is up and answers the
//! server's flight at once, so a handshake that has sent only part of a
//! ClientHello, or nothing for a while, is the cheapest thing to give up:
//! when the port is at its limit (in total, or for one source address) the
//! oldest such handshake is shed for the newcomer instead of making the
//! newcomer wait behind it. A silent one is given its grace first (half the
//! stall age): in a reconnect storm of real spokes the ClientHello of a
//! just-accepted connection may simply not be there yet, and shedding it
//! would only turn the storm into churn. A handshake past its ClientHello
//! is shed for any newcomer once its server flight has gone unanswered for
//! the answer budget: a real client answers within its round trip and its
//! own work, so one that has not after four times what clients here
//! typically take to answer (at least [`Limits::answer_floor`], at most
//! the stall age) will not; else it is shed once older than the stall age.
//!
//! A newcomer whose ClientHello is in and that finds no slot is not turned
//! away: it waits in the
//! [`Lobby`], first come first served per source, until a slot frees or a
//! handshake overruns its budget. Closing it would let a flood that
//! reconnects at once take every freed slot before a real spoke, backing
//! off, comes back; waiting, a flood's connections queue behind each other
//! and a new spoke is in after the handshakes queued before it, each a
//! short budget. Pure bookkeeping, no I/O: the listener in `server.rs`
//! does the sockets.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Limits of handshakes in progress.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// In progress at most, over all sources.
    pub total: usize,
    /// In progress at most from one source address.
    pub per_source: usize,
    /// A handshake past its ClientHello and older than this is stalled
    /// (a silent one after half of it).
    pub stall_after: Duration,
    /// The least a server flight may wait for the client's answer before
    /// its handshake may be shed.
    pub answer_floor: Duration,
}

impl Limits {
    /// How long a handshake that has sent nothing is kept before it may be
    /// shed.
    fn silent_grace(&self) -> Duration {
        self.stall_after / 2
    }
}

/// How far a handshake got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Accepted, no byte received yet.
    Silent,
    /// Some bytes, the ClientHello not yet complete.
    Partial,
    /// The ClientHello is in; the server is working on its answer.
    Hello,
    /// The server's flight went out; the client has not answered yet.
    Awaiting,
    /// The client answered the server's flight: a live client.
    Answered,
}

#[derive(Debug)]
struct Entry<T> {
    source: IpAddr,
    started: Instant,
    phase: Phase,
    /// When the server's flight went out (phase `Awaiting` on).
    awaiting_since: Option<Instant>,
    value: T,
}

/// The outcome of [`Slots::admit`].
#[derive(Debug)]
pub enum Admission<T> {
    /// The newcomer holds slot `id`; `shed` are the values of the
    /// handshakes given up for it (the caller closes them).
    Admitted { id: u64, shed: Vec<T> },
    /// No slot and nothing stalled to give up; the value comes back.
    Refused(T),
}

/// Handshakes in progress, oldest first, each carrying a `T` (the handle
/// that closes it).
#[derive(Debug)]
pub struct Slots<T> {
    limits: Limits,
    /// Keyed by admission order, so iteration is oldest first.
    entries: BTreeMap<u64, Entry<T>>,
    per_source: HashMap<IpAddr, usize>,
    next_id: u64,
    /// How long clients took to answer the server's flight (a moving
    /// average): only a real client answers, so this is what a real one
    /// needs here, now (its round trip and its own work, not the hub's).
    typical: Option<Duration>,
}

impl<T> Slots<T> {
    /// No handshake in progress.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            entries: BTreeMap::new(),
            per_source: HashMap::new(),
            next_id: 0,
            typical: None,
        }
    }

    /// How long a handshake whose server flight went out may wait for
    /// the client's answer before a newcomer with its ClientHello in may
    /// shed it: four times what clients typically took, within [answer
    /// floor, stall age].
    pub fn answer_budget(&self) -> Duration {
        let floor = self.limits.answer_floor.min(self.limits.stall_after);
        self.typical
            .map_or(floor, |t| t * 4)
            .clamp(floor, self.limits.stall_after)
    }

    /// Handshakes in progress.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is in progress.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `None` when a newcomer can be admitted now (a free slot, or one to
    /// shed); otherwise the instant the oldest handshake becomes stalled
    /// (a release may free a slot sooner).
    pub fn full_until(&self, now: Instant) -> Option<Instant> {
        if self.entries.len() < self.limits.total || self.victim(now, None, false).is_some() {
            return None;
        }
        let budget = self.answer_budget();
        self.entries
            .values()
            .map(|e| match (e.phase, e.awaiting_since) {
                (Phase::Silent, _) => e.started + self.limits.silent_grace(),
                (Phase::Awaiting, Some(at)) => {
                    (at + budget).min(e.started + self.limits.stall_after)
                }
                _ => e.started + self.limits.stall_after,
            })
            .min()
    }

    /// Admits a handshake from `source` that got to `phase` (see
    /// [`phase_of`]), shedding the oldest stalled one of that source, then
    /// of all sources, when a limit is reached.
    pub fn admit(&mut self, source: IpAddr, now: Instant, phase: Phase, value: T) -> Admission<T> {
        let mut shed = Vec::new();
        // A newcomer whose ClientHello is in has shown it is a real client:
        // it may shed a silent handshake without waiting out its grace.
        let proven = phase == Phase::Hello;
        if self.per_source.get(&source).copied().unwrap_or(0) >= self.limits.per_source {
            match self.victim(now, Some(source), proven) {
                Some(id) => shed.extend(self.remove(id)),
                None => return Admission::Refused(value),
            }
        }
        if self.entries.len() >= self.limits.total {
            match self.victim(now, None, proven) {
                Some(id) => shed.extend(self.remove(id)),
                None => return Admission::Refused(value),
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        *self.per_source.entry(source).or_default() += 1;
        self.entries.insert(
            id,
            Entry {
                source,
                started: now,
                phase,
                awaiting_since: None,
                value,
            },
        );
        Admission::Admitted { id, shed }
    }

    /// Handshake `id` got to `phase` at `now` (no-op when it is gone).
    /// Its first answer after the server's flight joins the typical
    /// answer time.
    pub fn advance(&mut self, id: u64, phase: Phase, now: Instant) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        if phase == Phase::Awaiting && e.awaiting_since.is_none() {
            e.awaiting_since = Some(now);
        }
        if phase == Phase::Answered
            && e.phase == Phase::Awaiting
            && let Some(since) = e.awaiting_since
        {
            let took = now.saturating_duration_since(since);
            self.typical = Some(match self.typical {
                None => took,
                Some(t) => (t * 7 + took) / 8,
            });
        }
        e.phase = e.phase.max(phase);
    }

    /// Handshake `id` ended (no-op when it was shed).
    pub fn release(&mut self, id: u64) -> Option<T> {
        self.remove(id)
    }

    fn remove(&mut self, id: u64) -> Option<T> {
        let entry = self.entries.remove(&id)?;
        if let Some(n) = self.per_source.get_mut(&entry.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&entry.source);
            }
        }
        Some(entry.value)
    }

    /// The handshake to give up, of `source` or of any source: the oldest
    /// silent one past its grace (any silent one for a `proven` newcomer),
    /// else the oldest partial one, else the oldest whose server flight is
    /// unanswered past the answer budget, else the oldest stalled one.
    fn victim(&self, now: Instant, source: Option<IpAddr>, proven: bool) -> Option<u64> {
        let candidates = || {
            self.entries
                .iter()
                .filter(move |(_, e)| source.is_none_or(|s| e.source == s))
        };
        let age = |e: &Entry<T>| now.saturating_duration_since(e.started);
        let grace = if proven {
            Duration::ZERO
        } else {
            self.limits.silent_grace()
        };
        let budget = self.answer_budget();
        candidates()
            .find(|(_, e)| e.phase == Phase::Silent && age(e) >= grace)
            .map(|(id, _)| *id)
            .or_else(|| {
                candidates()
                    .find(|(_, e)| e.phase == Phase::Partial)
                    .map(|(id, _)| *id)
            })
            .or_else(|| {
                // A server flight unanswered past the answer budget: a
                // client that will not answer.
                candidates()
                    .find(|(_, e)| {
                        e.phase == Phase::Awaiting
                            && e.awaiting_since
                                .is_some_and(|at| now.saturating_duration_since(at) >= budget)
                    })
                    .map(|(id, _)| *id)
            })
            .or_else(|| {
                candidates()
                    .find(|(_, e)| age(e) >= self.limits.stall_after)
                    .map(|(id, _)| *id)
            })
    }
}

/// Connections whose ClientHello is in, waiting for a handshake slot:
/// first come first served per source, at most `capacity` in all.
#[derive(Debug)]
pub struct Lobby<T> {
    capacity: usize,
    waiting: HashMap<IpAddr, VecDeque<(Instant, T)>>,
    len: usize,
}

impl<T> Lobby<T> {
    /// An empty lobby for at most `capacity` connections.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            waiting: HashMap::new(),
            len: 0,
        }
    }

    /// Connections waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a connection of `source` waits (a newcomer of that source
    /// then queues behind it).
    pub fn has(&self, source: IpAddr) -> bool {
        self.waiting.contains_key(&source)
    }

    /// Queues `value` of `source`, arrived at `now`; it comes back when the
    /// lobby is full.
    pub fn push(&mut self, source: IpAddr, now: Instant, value: T) -> Result<(), T> {
        if self.len >= self.capacity {
            return Err(value);
        }
        self.waiting
            .entry(source)
            .or_default()
            .push_back((now, value));
        self.len += 1;
        Ok(())
    }

    /// Hands each source's waiting connections, oldest first, to `admit`
    /// until it gives one back (no slot for that source now); those that
    /// arrived before `expired_before` go to `expire` instead.
    pub fn drain(
        &mut self,
        expired_before: Instant,
        mut admit: impl FnMut(IpAddr, T) -> Option<T>,
        mut expire: impl FnMut(T),
    ) {
        let mut emptied = Vec::new();
        for (source, queue) in &mut self.waiting {
            while let Some((arrived, value)) = queue.pop_front() {
                self.len -= 1;
                if arrived < expired_before {
                    expire(value);
                    continue;
                }
                if let Some(back) = admit(*source, value) {
                    queue.push_front((arrived, back));
                    self.len += 1;
                    break;
                }
            }
            if queue.is_empty() {
                emptied.push(*source);
            }
        }
        for source in emptied {
            self.waiting.remove(&source);
        }
    }
}

/// How far a connection got, from the bytes waiting on it at accept: a
/// ClientHello arrives in one TLS handshake record (content type 22) right
/// after the TCP handshake, so a complete first record means a real client
/// is on the other end.
pub fn phase_of(waiting: &[u8]) -> Phase {
    match waiting {
        [] => Phase::Silent,
        [22, _, _, hi, lo, rest @ ..]
            if rest.len() >= usize::from(u16::from_be_bytes([*hi, *lo])) =>
        {
            Phase::Hello
        }
        _ => Phase::Partial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
    const STALL: Duration = Duration::from_secs(2);
    const GRACE: Duration = Duration::from_secs(1);
    const ANSWER: Duration = Duration::from_millis(50);

    fn slots(total: usize, per_source: usize) -> Slots<&'static str> {
        Slots::new(Limits {
            total,
            per_source,
            stall_after: STALL,
            answer_floor: ANSWER,
        })
    }

    fn admitted(a: Admission<&'static str>) -> (u64, Vec<&'static str>) {
        match a {
            Admission::Admitted { id, shed } => (id, shed),
            Admission::Refused(v) => panic!("{v} refused"),
        }
    }

    #[test]
    fn the_phase_at_accept_comes_from_the_waiting_bytes() {
        assert_eq!(phase_of(&[]), Phase::Silent);
        assert_eq!(phase_of(&[22, 3, 1]), Phase::Partial);
        // A record announcing 4 bytes with 3 there, then 4.
        assert_eq!(phase_of(&[22, 3, 1, 0, 4, 1, 2, 3]), Phase::Partial);
        assert_eq!(phase_of(&[22, 3, 1, 0, 4, 1, 2, 3, 4]), Phase::Hello);
        // Not a handshake record: it fails in the handshake, fast.
        assert_eq!(phase_of(b"PRI * HTTP/2.0"), Phase::Partial);
    }

    #[test]
    fn a_newcomer_arriving_with_its_client_hello_is_not_shed_for_silent_ones() {
        let t = Instant::now();
        let mut s = slots(10, 2);
        let (_, _) = admitted(s.admit(A, t, Phase::Hello, "spoke"));
        admitted(s.admit(A, t, Phase::Silent, "flood 1"));
        // A silent one within its grace is kept: the newcomer waits.
        assert!(matches!(
            s.admit(A, t + GRACE / 2, Phase::Silent, "early"),
            Admission::Refused("early")
        ));
        for i in 0..100u32 {
            let at = t + GRACE * (i + 1);
            let (_, shed) = admitted(s.admit(A, at, Phase::Silent, "flood n"));
            assert_eq!(shed.len(), 1, "round {i}");
        }
        // The spoke's handshake is still there: only silent ones were shed.
        assert_eq!(s.len(), 2);
        let (_, shed) = admitted(s.admit(A, t + GRACE * 102, Phase::Hello, "spoke 2"));
        assert_eq!(shed, vec!["flood n"]);
    }

    #[test]
    fn silent_newcomers_wait_out_the_grace_but_a_proven_one_does_not() {
        // A reconnect storm: just-accepted connections whose ClientHello is
        // not in yet are not shed for one another (that would be churn)...
        let t = Instant::now();
        let mut s = slots(2, 2);
        admitted(s.admit(A, t, Phase::Silent, "storm 1"));
        admitted(s.admit(A, t, Phase::Silent, "storm 2"));
        assert!(matches!(
            s.admit(A, t + GRACE / 2, Phase::Silent, "storm 3"),
            Admission::Refused(_)
        ));
        assert_eq!(s.full_until(t), Some(t + GRACE));
        // ...but a newcomer with its ClientHello in is a real client.
        let (_, shed) = admitted(s.admit(A, t + GRACE / 2, Phase::Hello, "spoke"));
        assert_eq!(shed, vec!["storm 1"]);
    }

    #[test]
    fn a_newcomer_sheds_the_oldest_silent_handshake_of_its_source() {
        let t = Instant::now();
        let mut s = slots(10, 3);
        let (hello, _) = admitted(s.admit(A, t, Phase::Silent, "hello"));
        s.advance(hello, Phase::Hello, t);
        let (partial, _) = admitted(s.admit(A, t, Phase::Silent, "partial"));
        s.advance(partial, Phase::Partial, t);
        admitted(s.admit(A, t, Phase::Silent, "silent"));
        admitted(s.admit(B, t, Phase::Silent, "other source"));
        let (_, shed) = admitted(s.admit(A, t + GRACE, Phase::Silent, "new 1"));
        assert_eq!(shed, vec!["silent"]);
        // "new 1" is silent and the youngest: once past its grace the next
        // sheds it before the partial one, which is older.
        let (_, shed) = admitted(s.admit(A, t + GRACE * 2, Phase::Silent, "new 2"));
        assert_eq!(shed, vec!["new 1"]);
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn partial_handshakes_go_before_young_ones_past_their_client_hello() {
        let t = Instant::now();
        let mut s = slots(10, 2);
        let (hello, _) = admitted(s.admit(A, t, Phase::Silent, "hello"));
        s.advance(hello, Phase::Hello, t);
        let (partial, _) = admitted(s.admit(A, t, Phase::Silent, "partial"));
        s.advance(partial, Phase::Partial, t);
        let (new, shed) = admitted(s.admit(A, t, Phase::Silent, "new"));
        assert_eq!(shed, vec!["partial"]);
        s.advance(new, Phase::Hello, t);
        // Both are young and past their ClientHello: refused for now...
        assert!(matches!(
            s.admit(A, t + Duration::from_millis(100), Phase::Silent, "x"),
            Admission::Refused("x")
        ));
        // ...until the oldest has stalled.
        let (_, shed) = admitted(s.admit(A, t + STALL, Phase::Silent, "later"));
        assert_eq!(shed, vec!["hello"]);
    }

    #[test]
    fn a_proven_newcomer_sheds_a_handshake_whose_flight_went_unanswered() {
        let t = Instant::now();
        let mut s = slots(10, 3);
        let (working, _) = admitted(s.admit(A, t, Phase::Hello, "hub still working"));
        let (staller, _) = admitted(s.admit(A, t, Phase::Hello, "staller"));
        let (live, _) = admitted(s.admit(A, t, Phase::Hello, "live"));
        s.advance(staller, Phase::Awaiting, t + ANSWER);
        s.advance(live, Phase::Awaiting, t + ANSWER);
        s.advance(live, Phase::Answered, t + ANSWER + Duration::from_millis(1));
        // Within the budget the staller is kept: the client may be answering.
        assert!(matches!(
            s.admit(A, t + ANSWER * 3 / 2, Phase::Hello, "early"),
            Admission::Refused("early")
        ));
        assert_eq!(s.full_until(t + ANSWER), None, "below the total");
        // Past it, a newcomer takes its place (not the older one the hub is
        // still working on, nor the live one).
        let (_, shed) = admitted(s.admit(A, t + ANSWER * 2, Phase::Hello, "spoke"));
        assert_eq!(shed, vec!["staller"]);
        let _ = working;
    }

    #[test]
    fn the_answer_budget_follows_how_fast_clients_answer() {
        let t = Instant::now();
        let mut s = slots(10, 10);
        assert_eq!(s.answer_budget(), ANSWER, "nothing answered yet: the floor");
        let (id, _) = admitted(s.admit(A, t, Phase::Hello, "far spoke"));
        s.advance(id, Phase::Awaiting, t + Duration::from_millis(5));
        s.advance(id, Phase::Answered, t + Duration::from_millis(105));
        assert_eq!(s.answer_budget(), Duration::from_millis(400));
        // Only the first answer after the flight counts.
        s.advance(id, Phase::Answered, t + STALL);
        assert_eq!(s.answer_budget(), Duration::from_millis(400));
        // Never beyond the stall age.
        let (id, _) = admitted(s.admit(B, t, Phase::Hello, "very slow"));
        s.advance(id, Phase::Awaiting, t);
        s.advance(id, Phase::Answered, t + STALL * 10);
        assert_eq!(s.answer_budget(), STALL);
    }

    #[test]
    fn the_lobby_serves_each_source_in_arrival_order_and_expires_the_old() {
        let t = Instant::now();
        let mut lobby = Lobby::new(3);
        lobby.push(A, t, "a1").unwrap();
        lobby.push(B, t, "b1").unwrap();
        lobby.push(A, t + STALL, "a2").unwrap();
        assert_eq!(lobby.push(A, t, "a3"), Err("a3"), "full");
        assert!(lobby.has(A) && lobby.has(B));
        // A has room for one now, B none.
        let mut admitted = Vec::new();
        let mut expired = Vec::new();
        let mut room_a = 1;
        lobby.drain(
            t,
            |source, v| {
                if source == A && room_a > 0 {
                    room_a -= 1;
                    admitted.push(v);
                    None
                } else {
                    Some(v)
                }
            },
            |v| expired.push(v),
        );
        assert_eq!(admitted, vec!["a1"]);
        assert!(expired.is_empty());
        assert_eq!(lobby.len(), 2);
        // Later, "b1" has waited too long; "a2" has not.
        lobby.drain(
            t + Duration::from_millis(1),
            |_, v| Some(v),
            |v| expired.push(v),
        );
        assert_eq!(expired, vec!["b1"]);
        assert!(!lobby.has(B));
        assert_eq!(lobby.len(), 1);
    }

    #[test]
    fn the_total_limit_sheds_across_sources_and_waits_only_for_live_handshakes() {
        let t = Instant::now();
        let mut s = slots(2, 2);
        let (b, _) = admitted(s.admit(B, t, Phase::Silent, "b silent"));
        let (a, _) = admitted(s.admit(A, t, Phase::Silent, "a"));
        s.advance(a, Phase::Hello, t);
        assert_eq!(
            s.full_until(t),
            Some(t + GRACE),
            "a silent handshake within its grace is waited for"
        );
        let later = t + GRACE;
        assert_eq!(s.full_until(later), None, "then it can be shed");
        let (c, shed) = admitted(s.admit(A, later, Phase::Silent, "a2"));
        assert_eq!(shed, vec!["b silent"]);
        s.advance(c, Phase::Hello, t);
        assert_eq!(s.full_until(later), Some(t + STALL));
        assert!(matches!(
            s.admit(B, later, Phase::Silent, "b2"),
            Admission::Refused(_)
        ));
        assert_eq!(s.release(a), Some("a"));
        assert_eq!(s.release(b), None, "already shed");
        assert_eq!(s.full_until(later), None);
        admitted(s.admit(B, later, Phase::Silent, "b3"));
    }
}
