//! Which of a rank's launches its GPU has finished: the hangs where every
//! rank made the same calls (launch counts and digests agree, so nothing
//! else in watch mode can see them).
//!
//! Around each launch a rank marks its stream twice with events
//! ([`Events`]; the CUDA driver's in the interposer): just before NCCL
//! enqueues the launch's kernels (the launch's *start*) and just after
//! (its *end*). A launch is placed by its [`Mark`]: a collective launch by
//! its cut, a launch of Sends and Recvs alone by the cut it follows. The stream reaches the start mark once everything queued
//! before the launch has run; it reaches the end mark once NCCL's kernels
//! have finished too. [`Flights`] keeps the launches whose end the stream
//! has not reached, oldest first, and reports the oldest one ([`Flight`]):
//! its cut, whether the stream has started it, and for how long.
//!
//! Across ranks ([`hang`]), at the oldest unfinished mark of all:
//!
//! - a rank whose stream has not *started* that launch while other ranks
//!   are inside it or past it is held up by its own earlier work (a kernel
//!   that does not end, a call on another communicator that waits): NCCL
//!   waits for that rank, so it is named, with the ranks that wait;
//! - every rank inside the launch, none past it, means NCCL itself (or the
//!   network between the ranks) does not finish it: named as such.
//!
//! Sends and Recvs are not numbered alike across ranks, so at a mark of
//! Sends and Recvs the judge first asks whether every Send has its Recv
//! (an unmatched pair is the cause, named as such); only when they all do
//! is the launch a hang of its own.
//!
//! Either is said only once it has lasted the threshold (the judge's
//! `RANKWISE_TIMEOUT`). A rank whose streams have nothing to say (no CUDA
//! driver) reports [`Flight::Unknown`] and is left out of both.
//!
//! The hot path ([`Flights::depart`], [`Flights::land`]) allocates nothing
//! once warm: events come from a pool of at most [`MAX_IN_FLIGHT`] pairs,
//! and a launch made while that many are unfinished is not marked (the
//! oldest ones, the ones that matter, still are).

use super::judge::{named, seconds, who};
use super::wire::Summary;
use crate::core::Posted;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Launches marked at once, at most, per communicator.
pub const MAX_IN_FLIGHT: usize = 64;

/// A source of stream marks: the CUDA driver's events, or a test's.
pub trait Events {
    type Event: Copy;
    /// A new event (None: the driver refuses; the launch goes unmarked).
    fn create(&mut self) -> Option<Self::Event>;
    /// Marks `stream` with `ev` now: false if the driver refuses.
    fn record(&mut self, ev: Self::Event, stream: usize) -> bool;
    /// Whether the stream has reached `ev` (None: the driver cannot say).
    fn reached(&mut self, ev: Self::Event) -> Option<bool>;
    /// Gives `ev` back to the driver.
    fn destroy(&mut self, ev: Self::Event);
}

/// Where a launch stands in its communicator's order: collective launch
/// (cut) `m`, or (`p2p`) a launch of Sends and Recvs alone made after cut
/// `m` and before the next. Ordered as the launches are made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark {
    pub m: u64,
    pub p2p: bool,
}

impl Mark {
    /// Collective launch `m`.
    pub fn cut(m: u64) -> Mark {
        Mark { m, p2p: false }
    }

    /// The Sends and Recvs made after cut `m`.
    pub fn after(m: u64) -> Mark {
        Mark { m, p2p: true }
    }

    /// The launch as a message names it: `collective launch 5 (AllReduce
    /// #4)` from `post`, the launch at cut `m`; `the Send/Recv launch after
    /// collective launch 5`.
    pub fn named(&self, post: Option<&Posted>) -> String {
        match (self.p2p, post) {
            (true, _) => format!("the Send/Recv launch after collective launch {}", self.m),
            (false, Some(p)) => format!("collective launch {} ({})", self.m, named(p)),
            (false, None) => format!("collective launch {}", self.m),
        }
    }
}

/// A rank's oldest unfinished launch on a communicator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Flight {
    /// the rank cannot tell (no driver, or its streams are captured)
    #[default]
    Unknown,
    /// every marked launch has finished
    Clear,
    /// the launch at `mark` has not finished: its stream has `started` it
    /// or not, and has been where it is for `ms` milliseconds
    Out { mark: Mark, started: bool, ms: u64 },
}

impl Flight {
    /// How long it has been out (0 when not out).
    pub fn ms(&self) -> u64 {
        match self {
            Flight::Out { ms, .. } => *ms,
            _ => 0,
        }
    }

    /// The mark of the launch out, if one is.
    pub fn mark(&self) -> Option<Mark> {
        match self {
            Flight::Out { mark, .. } => Some(*mark),
            _ => None,
        }
    }

    /// As three words on the wire: kind, cut, milliseconds (with the
    /// started bit and the Send/Recv bit in the kind).
    pub fn words(&self) -> [u64; 3] {
        match *self {
            Flight::Unknown => [0, 0, 0],
            Flight::Clear => [1, 0, 0],
            Flight::Out { mark, started, ms } => {
                [2 + started as u64 + 2 * mark.p2p as u64, mark.m, ms]
            }
        }
    }

    /// The flight three words say (None: not one this build writes).
    pub fn from_words(w: [u64; 3]) -> Option<Flight> {
        match w[0] {
            0 => Some(Flight::Unknown),
            1 => Some(Flight::Clear),
            2..=5 => Some(Flight::Out {
                mark: Mark {
                    m: w[1],
                    p2p: w[0] >= 4,
                },
                started: w[0] % 2 == 1,
                ms: w[2],
            }),
            _ => None,
        }
    }

    /// One flight standing for several (a host's ranks): the one out the
    /// longest, else clear if any is, else unknown. The judge asks for
    /// each rank's once the longest passes its threshold.
    pub fn fold(all: impl IntoIterator<Item = Flight>) -> Flight {
        all.into_iter().fold(Flight::Unknown, |a, b| match (a, b) {
            (Flight::Out { ms: x, .. }, Flight::Out { ms: y, .. }) if y > x => b,
            (Flight::Out { .. }, _) => a,
            (_, Flight::Out { .. }) => b,
            (Flight::Clear, _) | (_, Flight::Clear) => Flight::Clear,
            _ => Flight::Unknown,
        })
    }
}

struct Marked<E> {
    mark: Mark,
    stream: usize,
    start: E,
    end: Option<E>,
    /// when a poll first found it the oldest unfinished launch (no clock
    /// is read on the hot path)
    front: Option<Instant>,
    /// when the stream was first seen past the start mark
    started: Option<Instant>,
}

/// One communicator's marked launches, oldest first, and its spare events.
pub struct Flights<E> {
    marked: VecDeque<Marked<E>>,
    spare: Vec<E>,
    /// every launch since the last [`land`](Self::land) is marked at start
    /// and still waits for its end mark
    landing: usize,
}

impl<E: Copy> Default for Flights<E> {
    fn default() -> Self {
        Flights {
            marked: VecDeque::with_capacity(MAX_IN_FLIGHT),
            spare: Vec::with_capacity(2 * MAX_IN_FLIGHT),
            landing: 0,
        }
    }
}

impl<E: Copy> Flights<E> {
    fn event(&mut self, ev: &mut impl Events<Event = E>) -> Option<E> {
        self.spare.pop().or_else(|| ev.create())
    }

    /// The launch at `mark` is about to be enqueued on `stream`: marks its
    /// start. False when it goes unmarked (too many out, or the driver
    /// refused).
    pub fn depart(&mut self, ev: &mut impl Events<Event = E>, mark: Mark, stream: usize) -> bool {
        if self.marked.len() >= MAX_IN_FLIGHT {
            return false;
        }
        let Some(start) = self.event(ev) else {
            return false;
        };
        if !ev.record(start, stream) {
            self.spare.push(start);
            return false;
        }
        self.marked.push_back(Marked {
            mark,
            stream,
            start,
            end: None,
            front: None,
            started: None,
        });
        self.landing += 1;
        true
    }

    /// The launches marked since the last call are enqueued: marks their
    /// ends.
    pub fn land(&mut self, ev: &mut impl Events<Event = E>) {
        let n = std::mem::take(&mut self.landing);
        let from = self.marked.len().saturating_sub(n);
        for i in from..self.marked.len() {
            let Some(end) = self.event(ev) else { continue };
            if ev.record(end, self.marked[i].stream) {
                self.marked[i].end = Some(end);
            } else {
                self.spare.push(end);
            }
        }
    }

    /// Gives every event back (the communicator's watch ends).
    pub fn clear(&mut self, ev: &mut impl Events<Event = E>) {
        for f in self.marked.drain(..) {
            ev.destroy(f.start);
            if let Some(end) = f.end {
                ev.destroy(end);
            }
        }
        for e in self.spare.drain(..) {
            ev.destroy(e);
        }
        self.landing = 0;
    }

    /// Drops the launches whose end the streams reached (their events
    /// spare again) and says where the oldest other one is, at `now`.
    pub fn poll(&mut self, ev: &mut impl Events<Event = E>, now: Instant) -> Flight {
        while let Some(f) = self.marked.front() {
            let Some(end) = f.end else { break };
            match ev.reached(end) {
                Some(true) => {
                    let f = self.marked.pop_front().expect("front was there");
                    self.spare.extend([f.start, end]);
                }
                Some(false) => break,
                None => return Flight::Unknown,
            }
        }
        let Some(f) = self.marked.front_mut() else {
            return Flight::Clear;
        };
        let front = *f.front.get_or_insert(now);
        if f.started.is_none() {
            match ev.reached(f.start) {
                Some(true) => f.started = Some(now),
                Some(false) => {}
                None => return Flight::Unknown,
            }
        }
        let since = f.started.unwrap_or(front);
        Flight::Out {
            mark: f.mark,
            started: f.started.is_some(),
            ms: now.saturating_duration_since(since).as_millis() as u64,
        }
    }
}

/// The oldest unfinished launch among `all`'s flights, once some rank's
/// has been out for `threshold`: the launch to name in [`hang`].
pub fn overdue(all: &[Summary], threshold: Duration) -> Option<Mark> {
    let t = threshold.as_millis() as u64;
    if !all.iter().any(|s| s.flight.ms() >= t) {
        return None;
    }
    all.iter().filter_map(|s| s.flight.mark()).min()
}

/// A hang at `at` in every rank's flight (`all` in rank order), once it
/// has lasted `threshold`; `post` is the collective launch at `at` as a
/// rank made it, to name it. None while nothing has lasted that long, when
/// some rank has not made a collective launch (a stall, named as such), or
/// when no rank is inside it (what holds every rank is elsewhere).
///
/// At a mark of Sends and Recvs only the ranks out there take part (the
/// others may have no Send or Recv there at all), and the caller has found
/// every Send matched by a Recv.
pub fn hang(
    all: &[Summary],
    at: Mark,
    threshold: Duration,
    post: Option<&Posted>,
) -> Option<String> {
    let t = threshold.as_millis() as u64;
    let (mut before, mut inside, mut past) = (Vec::new(), Vec::new(), Vec::new());
    for (r, s) in all.iter().enumerate() {
        if !at.p2p && s.m < at.m {
            // a rank that has not made the launch is neither in it nor
            // past it: the judge's stall names it, not this
            return None;
        }
        match s.flight {
            Flight::Out { mark, started, ms } if mark == at => match started {
                false => before.push((r, ms)),
                true => inside.push((r, ms)),
            },
            Flight::Out { .. } | Flight::Clear if !at.p2p => past.push(r),
            _ => {}
        }
    }
    // the ranks named must each have been where they are for the threshold
    let named_ones = if before.is_empty() { &inside } else { &before };
    if named_ones.iter().any(|&(_, ms)| ms < t) {
        return None;
    }
    let longest = named_ones.iter().map(|&(_, ms)| ms).max().unwrap_or(0);
    let (before, inside) = (ranks(&before), ranks(&inside));
    let what = at.named(post);
    let s = format!("{} s", seconds(Duration::from_millis(longest)));
    let has = |r: &[usize]| if r.len() == 1 { "has" } else { "have" };
    if !before.is_empty() && !inside.is_empty() {
        let streams = match before.len() {
            1 => format!("the stream of {} has", who(&before)),
            _ => format!("the streams of {} have", who(&before)),
        };
        let waiting: Vec<usize> = inside.iter().chain(&past).copied().collect();
        let wait = if waiting.len() == 1 { "waits" } else { "wait" };
        let theirs = match (at.p2p, waiting.len()) {
            (false, _) => "it",
            (true, 1) => "its own",
            (true, _) => "their own",
        };
        return Some(format!(
            "hang: {streams} not reached {what} for {s}: work queued before it on that stream has not finished (a kernel that does not end, or a call that waits on another communicator); {} {wait} inside {theirs} for {}",
            who(&waiting),
            who(&before),
        ));
    }
    if before.is_empty() && !inside.is_empty() {
        let everyone = !at.p2p && past.is_empty() || at.p2p && inside.len() == all.len();
        let whom = match everyone {
            true => "every rank has".to_string(),
            false => format!("{} {}", who(&inside), has(&inside)),
        };
        let rest = match (at.p2p, past.is_empty()) {
            (true, _) => " though every Send has its Recv".to_string(),
            (false, true) => String::new(),
            (false, false) => format!(", while {} finished it", who(&past)),
        };
        return Some(format!(
            "hang: {whom} been inside {what} for {s} and it has not finished{rest}; no rank's own earlier work holds it up: NCCL or the network between the ranks does (NCCL_DEBUG=INFO names the transport)"
        ));
    }
    None
}

fn ranks(with_ms: &[(usize, u64)]) -> Vec<usize> {
    with_ms.iter().map(|&(r, _)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Call, DataType, Func, RedOp};

    /// Events whose streams a test moves by hand: an event is reached once
    /// its stream has passed the position it was recorded at.
    #[derive(Default)]
    struct Hand {
        /// per event: (stream, position when recorded)
        at: Vec<(usize, u64)>,
        /// per stream: marks recorded, and marks passed
        issued: [u64; 2],
        passed: [u64; 2],
        refuse: bool,
        destroyed: usize,
    }

    impl Events for Hand {
        type Event = usize;
        fn create(&mut self) -> Option<usize> {
            self.at.push((0, 0));
            Some(self.at.len() - 1)
        }
        fn record(&mut self, ev: usize, stream: usize) -> bool {
            self.issued[stream] += 1;
            self.at[ev] = (stream, self.issued[stream]);
            true
        }
        fn reached(&mut self, ev: usize) -> Option<bool> {
            let (s, pos) = self.at[ev];
            (!self.refuse).then_some(self.passed[s] >= pos)
        }
        fn destroy(&mut self, _: usize) {
            self.destroyed += 1;
        }
    }

    fn out(f: Flight) -> (u64, bool) {
        match f {
            Flight::Out { mark, started, .. } => (mark.m, started),
            other => panic!("not out: {other:?}"),
        }
    }

    #[test]
    fn the_oldest_unfinished_launch_is_reported_started_or_not() {
        let (mut hand, mut f) = (Hand::default(), Flights::default());
        let now = Instant::now();
        assert_eq!(f.poll(&mut hand, now), Flight::Clear);
        for m in 1..=3 {
            assert!(f.depart(&mut hand, Mark::cut(m), 0));
            f.land(&mut hand);
        }
        // marks: start1 end1 start2 end2 start3 end3 at positions 1..6
        assert_eq!(out(f.poll(&mut hand, now)), (1, false));
        hand.passed[0] = 1;
        assert_eq!(out(f.poll(&mut hand, now)), (1, true));
        hand.passed[0] = 3;
        assert_eq!(out(f.poll(&mut hand, now)), (2, true));
        hand.passed[0] = 6;
        assert_eq!(f.poll(&mut hand, now), Flight::Clear);
        // the six events are spare now: the next launches use them again
        for m in 4..=6 {
            f.depart(&mut hand, Mark::cut(m), 0);
            f.land(&mut hand);
        }
        assert_eq!(hand.at.len(), 6);
        f.clear(&mut hand);
        assert_eq!(hand.destroyed, 6);
    }

    #[test]
    fn time_counts_from_the_first_poll_then_from_the_start_seen() {
        let (mut hand, mut f) = (Hand::default(), Flights::default());
        f.depart(&mut hand, Mark::cut(1), 1);
        f.land(&mut hand);
        let t0 = Instant::now();
        let ms = |f: Flight| f.ms();
        assert_eq!(ms(f.poll(&mut hand, t0)), 0);
        let later = t0 + Duration::from_millis(700);
        assert_eq!(ms(f.poll(&mut hand, later)), 700);
        hand.passed[1] = 1;
        let t1 = later + Duration::from_millis(10);
        assert_eq!(ms(f.poll(&mut hand, t1)), 0);
        assert_eq!(ms(f.poll(&mut hand, t1 + Duration::from_millis(250))), 250);
    }

    #[test]
    fn a_launch_in_a_group_is_marked_at_its_end_and_the_rest_wait() {
        let (mut hand, mut f) = (Hand::default(), Flights::default());
        // two communicators' launches of one group would each depart, then
        // land once; here two launches depart before one land
        f.depart(&mut hand, Mark::cut(1), 0);
        f.depart(&mut hand, Mark::cut(2), 0);
        f.land(&mut hand);
        // starts at 1, 2; ends at 3, 4
        hand.passed[0] = 3;
        assert_eq!(out(f.poll(&mut hand, Instant::now())), (2, true));
    }

    #[test]
    fn no_more_than_the_pool_is_marked_and_a_silent_driver_is_unknown() {
        let (mut hand, mut f) = (Hand::default(), Flights::default());
        for m in 0..MAX_IN_FLIGHT as u64 {
            assert!(f.depart(&mut hand, Mark::cut(m + 1), 0));
            f.land(&mut hand);
        }
        assert!(!f.depart(&mut hand, Mark::cut(99), 0));
        f.land(&mut hand);
        assert_eq!(hand.at.len(), 2 * MAX_IN_FLIGHT);
        hand.refuse = true;
        assert_eq!(f.poll(&mut hand, Instant::now()), Flight::Unknown);
    }

    #[test]
    fn flights_cross_the_wire_and_fold_to_the_longest() {
        let all = [
            Flight::Unknown,
            Flight::Clear,
            o(7, true, 40),
            o(6, false, 900),
            p(6, true, 30),
        ];
        for f in all {
            assert_eq!(Flight::from_words(f.words()), Some(f));
        }
        assert_eq!(Flight::from_words([6, 0, 0]), None);
        assert_eq!(Flight::fold(all), all[3]);
        assert_eq!(Flight::fold([all[0], all[1]]), Flight::Clear);
        assert_eq!(Flight::fold([all[0]]), Flight::Unknown);
    }

    fn post(op_count: u64) -> Posted {
        Posted {
            op_count,
            calls: vec![Call {
                func: Func::AllReduce,
                sendbuff: 0x1000,
                recvbuff: 0x2000,
                count: 8,
                datatype: DataType::Float32,
                op: RedOp::Sum,
                op_code: 0,
                root: 0,
            }],
        }
    }

    /// Summaries of ranks that each made 9 collective launches.
    fn at(flights: &[Flight]) -> Vec<Summary> {
        flights
            .iter()
            .map(|&flight| Summary {
                flight,
                m: 9,
                ..Summary::default()
            })
            .collect()
    }

    /// Out at collective launch `m`.
    fn o(m: u64, started: bool, ms: u64) -> Flight {
        Flight::Out {
            mark: Mark::cut(m),
            started,
            ms,
        }
    }

    /// Out at the Sends and Recvs after collective launch `m`.
    fn p(m: u64, started: bool, ms: u64) -> Flight {
        Flight::Out {
            mark: Mark::after(m),
            started,
            ms,
        }
    }

    #[test]
    fn a_rank_whose_stream_never_reaches_the_launch_is_named() {
        let t = Duration::from_secs(2);
        let all = at(&[
            o(5, true, 2400),
            o(5, true, 2300),
            o(5, false, 2500),
            o(6, false, 10),
        ]);
        assert_eq!(overdue(&all, t), Some(Mark::cut(5)));
        assert_eq!(
            hang(&all, Mark::cut(5), t, Some(&post(4))).unwrap(),
            "hang: the stream of rank 2 has not reached collective launch 5 (AllReduce #4) for 2.5 s: work queued before it on that stream has not finished (a kernel that does not end, or a call that waits on another communicator); ranks 0,1,3 wait inside it for rank 2"
        );
        // not before the threshold
        let early = at(&[o(5, true, 1900), o(5, false, 1950)]);
        assert_eq!(overdue(&early, t), None);
        assert_eq!(hang(&early, Mark::cut(5), t, Some(&post(4))), None);
        // two ranks held, one waiting
        let two = at(&[o(5, false, 3000), o(5, true, 2100), o(5, false, 2000)]);
        assert_eq!(
            hang(&two, Mark::cut(5), t, Some(&post(4))).unwrap(),
            "hang: the streams of ranks 0,2 have not reached collective launch 5 (AllReduce #4) for 3.0 s: work queued before it on that stream has not finished (a kernel that does not end, or a call that waits on another communicator); rank 1 waits inside it for ranks 0,2"
        );
    }

    #[test]
    fn every_rank_inside_a_launch_is_a_hang_in_nccl() {
        let t = Duration::from_secs(2);
        let all = at(&[o(9, true, 2100), o(9, true, 2050), Flight::Unknown]);
        assert_eq!(
            hang(&all, Mark::cut(9), t, Some(&post(9))).unwrap(),
            "hang: every rank has been inside collective launch 9 (AllReduce #9) for 2.1 s and it has not finished; no rank's own earlier work holds it up: NCCL or the network between the ranks does (NCCL_DEBUG=INFO names the transport)"
        );
        // a rank that never made the launch did not finish it: the stall
        // names that rank (what PyTorch's isend before an all_reduce does)
        let mut behind = at(&[o(9, true, 2100), o(9, true, 2100), Flight::Clear]);
        behind[2].m = 8;
        assert_eq!(hang(&behind, Mark::cut(9), t, Some(&post(9))), None);
        let some = at(&[o(9, true, 2100), Flight::Clear]);
        assert!(
            hang(&some, Mark::cut(9), t, Some(&post(9)))
                .unwrap()
                .starts_with("hang: rank 0 has been inside collective launch 9 (AllReduce #9) for 2.1 s and it has not finished, while rank 1 finished it; no rank's"),
        );
    }

    #[test]
    fn streams_held_on_every_rank_or_nothing_long_out_name_nothing() {
        let t = Duration::from_secs(2);
        // no rank inside: what holds them is not this communicator's launch
        let held = at(&[o(3, false, 5000), o(3, false, 5000)]);
        assert_eq!(overdue(&held, t), Some(Mark::cut(3)));
        assert_eq!(hang(&held, Mark::cut(3), t, Some(&post(3))), None);
        let clear = at(&[Flight::Clear, Flight::Unknown, o(4, true, 10)]);
        assert_eq!(overdue(&clear, t), None);
    }

    #[test]
    fn sends_and_recvs_after_a_cut_come_between_it_and_the_next() {
        let t = Duration::from_secs(2);
        assert!(Mark::cut(5) < Mark::after(5) && Mark::after(5) < Mark::cut(6));
        let all = at(&[o(6, true, 2500), p(5, true, 2100), o(5, true, 10)]);
        assert_eq!(overdue(&all, t), Some(Mark::cut(5)));
        let all = at(&[o(6, true, 2500), p(5, true, 2100)]);
        assert_eq!(overdue(&all, t), Some(Mark::after(5)));
        // a rank in its Sends and Recvs after launch 5 finished launch 5
        let all = at(&[o(5, true, 2500), p(5, true, 2100)]);
        assert!(
            hang(&all, Mark::cut(5), t, Some(&post(4)))
                .unwrap()
                .contains("while rank 1 finished it;")
        );
    }

    #[test]
    fn sends_and_recvs_that_never_finish_though_matched_are_named() {
        let t = Duration::from_secs(2);
        // rank 3 has no Send or Recv there: neither named nor waiting
        let held = at(&[
            p(5, true, 2200),
            p(5, true, 2300),
            p(5, false, 2600),
            Flight::Clear,
        ]);
        assert_eq!(
            hang(&held, Mark::after(5), t, None).unwrap(),
            "hang: the stream of rank 2 has not reached the Send/Recv launch after collective launch 5 for 2.6 s: work queued before it on that stream has not finished (a kernel that does not end, or a call that waits on another communicator); ranks 0,1 wait inside their own for rank 2"
        );
        let inside = at(&[p(5, true, 2200), p(5, true, 2300)]);
        assert_eq!(
            hang(&inside, Mark::after(5), t, None).unwrap(),
            "hang: every rank has been inside the Send/Recv launch after collective launch 5 for 2.3 s and it has not finished though every Send has its Recv; no rank's own earlier work holds it up: NCCL or the network between the ranks does (NCCL_DEBUG=INFO names the transport)"
        );
        let some = at(&[p(5, true, 2200), Flight::Clear, p(5, true, 2050)]);
        assert!(
            hang(&some, Mark::after(5), t, None)
                .unwrap()
                .starts_with("hang: ranks 0,2 have been inside the Send/Recv launch after")
        );
        // not before every named rank has been there for the threshold
        let early = at(&[p(5, true, 2200), p(5, true, 1200)]);
        assert_eq!(hang(&early, Mark::after(5), t, None), None);
    }
}
