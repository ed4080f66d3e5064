//! The first round of a launch's agreement: its collectives and every one
//! of its Send/Recv pairs posted in one round, then the collectives
//! compared by `core::agree` and each pair met ([`super::pairs::meet`]).

use super::missing::{missing_error, whereabouts};
use super::pairs::{self, Side};
use super::round::{self, Parties, Posting, Round};
use super::{Failure, Link, Peers, keys};
use crate::core::agree::{made_anyway, notices};
use crate::core::{Call, Error, Launch, Posted, agree, wire};
use crate::transport::store::{Missing, Share, gathered};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// One communicator's share of a launch in flight.
struct InFlight {
    /// its collectives' exchange (first in `postings`), when it has one
    colls: bool,
    /// its Sends and Recvs to other ranks with their pair numbers, each
    /// with its posting after the collectives'
    sides: Vec<(Side, u64)>,
    postings: Vec<Posting>,
    /// `AllReduce (opCount 3)`: where this rank is, and the pairs it
    /// waits in ([`super::cycle::note`])
    note: Vec<u8>,
    /// this rank refused the launch: its posts are notices giving why
    refused: bool,
}

/// What a rank found of its Send/Recv pairs: the first failure (in call
/// order), and each peer it heard from with the opCount of the peer's
/// launch (whose verdict it reads, and which reads its own).
pub struct Pairing {
    pub verdict: Result<(), Failure>,
    pub peers: BTreeSet<(usize, u64)>,
}

impl Peers {
    /// The number of the next collective round.
    fn next_round(&mut self) -> u64 {
        self.rounds += 1;
        self.rounds - 1
    }
}

/// The posting of a round of collectives: every rank a party, on the lane
/// when there is one.
fn collectives(link: &Link, me: usize, seq: u64, value: Vec<u8>) -> Posting {
    Posting {
        key: keys::collectives(&link.key, seq),
        parties: Parties::All,
        party: me,
        value,
        lane_round: link.lane.is_some().then_some(seq),
        tier_round: (link.lane.is_none() && link.tier.is_some()).then_some(seq),
    }
}

/// Numbers a launch's Sends and Recvs and makes its postings: its
/// collectives, then its pairs. Sends to self pair with this rank's own
/// Recvs from self here, with or without a link. A refused launch
/// (`refused`: why) posts a notice in each place instead.
fn post(p: &mut Peers, l: &Launch, refused: Option<&str>) -> Result<InFlight, Error> {
    let me = p.me;
    let sides = match refused {
        None => p.pairs.number(me, l)?,
        Some(_) => p.pairs.count(me, l),
    };
    let mut f = InFlight {
        colls: false,
        sides: Vec::new(),
        postings: Vec::new(),
        note: Vec::new(),
        refused: refused.is_some(),
    };
    if p.link.is_none() {
        return Ok(f);
    }
    let notice = refused.map(wire::encode_notice);
    if !l.colls.is_empty() && p.nranks > 1 {
        let seq = p.next_round();
        let link = p.link.as_ref().expect("checked above");
        f.colls = true;
        let value = match &notice {
            Some(n) => n.clone(),
            None => wire::encode_calls(l.op_count, &l.colls),
        };
        f.postings.push(collectives(link, me, seq, value));
    }
    let link = p.link.as_ref().expect("checked above");
    for (sd, seq) in &sides {
        let (src, dst, party) = pairs::ends(me, sd);
        f.postings.push(Posting {
            key: keys::pair(&link.key, src, dst, *seq),
            parties: Parties::Two([link.owner(src), link.owner(dst)]),
            party,
            value: match &notice {
                Some(n) => n.clone(),
                None => pairs::encode_side(sd),
            },
            lane_round: None,
            tier_round: None,
        });
    }
    if !f.postings.is_empty() {
        let waits: Vec<(usize, usize, u64)> = sides
            .iter()
            .map(|(sd, seq)| {
                let (src, dst, _) = pairs::ends(me, sd);
                (src, dst, *seq)
            })
            .collect();
        f.note = super::cycle::note(&l.describe(), &waits);
    }
    f.sides = sides;
    Ok(f)
}

/// What a rank posted in a round: its calls, or a notice giving why it
/// does not make them.
enum Post {
    Calls(Posted),
    Notice(String),
}

/// Every rank's post of the collectives from their exchange's shares, or
/// why some did not come (named with where they were last).
fn posts_of(
    link: &Link,
    shares: Vec<Share>,
    what: impl FnOnce() -> String,
    timeout: Duration,
) -> Result<Vec<Post>, Failure> {
    match gathered(shares) {
        Ok(all) => Ok(all
            .iter()
            .map(|b| match wire::notice(b) {
                Some(why) => Ok(Post::Notice(why)),
                None => wire::decode(b).map(Post::Calls),
            })
            .collect::<Result<Vec<_>, _>>()?),
        Err(missing) => {
            let error = missing_error(&missing, &what(), timeout);
            let late: Vec<usize> = missing
                .iter()
                .filter(|(_, m)| *m == Missing::Timeout)
                .map(|(r, _)| *r)
                .collect();
            let detail = (!late.is_empty()).then(|| whereabouts(link, &late));
            Err(Failure { error, detail })
        }
    }
}

/// Every rank's calls, when no rank gave notice; otherwise the error the
/// notices make (on a rank that refused the launch: Ok when every rank
/// did, else the error of the ranks that made it).
fn calls_of(
    all: Vec<Post>,
    what: impl FnOnce() -> String,
    refused: bool,
) -> Result<Vec<Posted>, Failure> {
    if !refused && all.iter().all(|p| matches!(p, Post::Calls(_))) {
        // the common case: every rank posted its calls
        return Ok(all
            .into_iter()
            .filter_map(|p| match p {
                Post::Calls(c) => Some(c),
                Post::Notice(_) => None,
            })
            .collect());
    }
    let mut said = Vec::new();
    let mut made = Vec::new();
    let mut posted = Vec::with_capacity(all.len());
    for (r, p) in all.into_iter().enumerate() {
        match p {
            Post::Notice(why) => said.push((r, why)),
            Post::Calls(c) => {
                made.push(r);
                posted.push(c);
            }
        }
    }
    if refused {
        return match made.is_empty() {
            true => Ok(Vec::new()),
            false => Err(made_anyway(&what(), &made).into()),
        };
    }
    notices(&what(), &said, said.len() + made.len())?;
    Ok(posted)
}

/// `AllReduce #3`, or `a group`: what a wait for collectives names.
fn what(op_count: u64, calls: &[Call]) -> String {
    calls
        .first()
        .map(|c| format!("{} #{op_count}", c.func))
        .unwrap_or_else(|| "a group".into())
}

/// Compares a launch's collectives with every rank's and pairs its Sends
/// and Recvs with their peers', from the first round's answers.
fn judge(
    p: &Peers,
    l: &Launch,
    f: &InFlight,
    shares: Vec<Vec<Share>>,
    timeout: Duration,
) -> Result<Pairing, Failure> {
    let mut pairing = Pairing {
        verdict: Ok(()),
        peers: BTreeSet::new(),
    };
    let Some(link) = &p.link else {
        return Ok(pairing);
    };
    let mut shares = shares.into_iter();
    if f.colls {
        // the launch's name is made only when a wait or a notice needs it
        let name = || what(l.op_count, &l.colls);
        let all = posts_of(link, shares.next().unwrap_or_default(), name, timeout)?;
        let all = calls_of(all, name, f.refused)?;
        if let Some(error) = (!all.is_empty())
            .then(|| agree::collectives(&all).err())
            .flatten()
        {
            let detail = Some(agree::sides(&all));
            return Err(Failure { error, detail });
        }
    }
    for ((sd, seq), posting) in f.sides.iter().zip(&f.postings[usize::from(f.colls)..]) {
        let peer = sd.call.root;
        let theirs = shares
            .next()
            .and_then(|sh| sh.into_iter().nth(1 - posting.party))
            .unwrap_or(Err(Missing::Timeout));
        if let Some(why) = theirs.as_ref().ok().and_then(|b| wire::notice(b)) {
            // the peer refused its side: nobody goes on with this pair
            if pairing.verdict.is_ok() && !f.refused {
                let name = pairs::describe(sd, *seq);
                pairing.verdict = Err(notices(&name, &[(peer, why)], 2).unwrap_err().into());
            }
            continue;
        }
        if f.refused {
            // the peer made its side of a pair this rank refused
            if theirs.is_ok() && pairing.verdict.is_ok() {
                let name = pairs::describe(sd, *seq);
                pairing.verdict = Err(made_anyway(&name, &[peer]).into());
            }
            continue;
        }
        let late = theirs == Err(Missing::Timeout);
        if let Ok(b) = &theirs
            && let Ok(t) = pairs::decode_side(b)
        {
            pairing.peers.insert((peer, t.op_count));
        }
        if pairing.verdict.is_ok()
            && let Err(error) = pairs::meet(p.me, sd, *seq, theirs, timeout)
        {
            let detail = late.then(|| whereabouts(link, &[peer]));
            pairing.verdict = Err(Failure { error, detail });
        }
    }
    Ok(pairing)
}

/// The first round on every communicator of a launch: each one's
/// pairing (None where nothing was exchanged), or the first failure of
/// its collectives.
pub fn first_round(
    launches: &mut [(&mut Peers, &Launch)],
    refused: Option<&str>,
    deadline: Instant,
    timeout: Duration,
) -> Result<Vec<Option<Pairing>>, Failure> {
    let mut flights = Vec::with_capacity(launches.len());
    for (p, l) in launches.iter_mut() {
        flights.push(post(p, l, refused)?);
    }
    let answers = {
        let rounds: Vec<Round<'_>> = launches
            .iter()
            .zip(&flights)
            .filter_map(|((p, _), f)| {
                let link = p.link.as_ref()?;
                (!f.postings.is_empty()).then(|| Round {
                    link,
                    me: p.me,
                    postings: &f.postings,
                    reads: true,
                    note: Some(&f.note),
                    pairs: Some(&p.pairs),
                })
            })
            .collect();
        round::exchange(&rounds, deadline)?
    };
    let mut answers = answers.into_iter();
    let mut pairings = Vec::with_capacity(launches.len());
    for ((p, l), f) in launches.iter().zip(&flights) {
        pairings.push(if p.link.is_none() || f.postings.is_empty() {
            None
        } else {
            let shares = answers.next().unwrap_or_default();
            Some(judge(p, l, f, shares, timeout)?)
        });
    }
    Ok(pairings)
}

/// [`Peers::exchange`]: one round of collectives, every rank's post back.
pub fn exchange(p: &mut Peers, mine: &Posted, timeout: Duration) -> Result<Vec<Posted>, Failure> {
    if p.link.is_none() || p.nranks < 2 {
        return Ok(vec![mine.clone()]);
    }
    let deadline = Instant::now() + timeout;
    let seq = p.next_round();
    let link = p.link.as_ref().expect("checked above");
    let postings = [collectives(link, p.me, seq, wire::encode(mine))];
    let name = what(mine.op_count, &mine.calls);
    let round = Round {
        link,
        me: p.me,
        postings: &postings,
        reads: true,
        note: Some(name.as_bytes()),
        pairs: None,
    };
    let shares = round::exchange(&[round], deadline)?
        .pop()
        .and_then(|mut r| r.pop())
        .unwrap_or_default();
    let all = posts_of(link, shares, || name.clone(), timeout)?;
    calls_of(all, || name, false)
}
