use super::*;

fn spec(seed: u64) -> Spec {
    Spec {
        nranks: 4,
        steps: 60,
        seed,
        p2p_percent: 30,
        period: None,
        style: Style::default(),
    }
}

#[test]
fn generation_is_deterministic() {
    let s = spec(7);
    assert_eq!(s.render(Fault::None), s.render(Fault::None));
    assert_ne!(s.render(Fault::None), spec(8).render(Fault::None));
}

#[test]
fn interleaving_keeps_each_ranks_order() {
    let mut s = spec(3);
    let per_rank = s.render(Fault::None);
    s.style.layout = Layout::Interleaved;
    let all = s.render(Fault::None);
    assert_eq!(all.len(), 1);
    let text = String::from_utf8(all[0].1.clone()).unwrap();
    for (r, (_, bytes)) in per_rank.iter().enumerate() {
        let mine = String::from_utf8(bytes.clone()).unwrap();
        let tag = format!(":{}:", s.pid(r as u32));
        let from_all: Vec<&str> = text.lines().filter(|l| l.contains(&tag)).collect();
        let from_own: Vec<&str> = mine.lines().filter(|l| l.contains(&tag)).collect();
        assert_eq!(from_all, from_own);
    }
}

#[test]
fn faults_change_exactly_one_rank() {
    let s = spec(11);
    let clean = s.render(Fault::None);
    let mut rng = Rng::new(5);
    for kind in [
        FaultKind::Count,
        FaultKind::Datatype,
        FaultKind::OpKind,
        FaultKind::Skip,
        FaultKind::SkipSeveral,
        FaultKind::Extra,
        FaultKind::Swap,
    ] {
        let f = s.place(kind, &mut rng).unwrap();
        let bad = s.render(f);
        let differing: Vec<usize> = (0..4).filter(|&r| clean[r].1 != bad[r].1).collect();
        assert_eq!(differing.len(), 1, "{kind:?}");
    }
}

#[test]
fn a_skip_shows_where_the_next_call_first_differs() {
    let s = spec(11);
    let keys = s.collective_keys();
    // a skip of one call at #j shows at the first #p >= j whose call
    // differs from #p+1's; where neighbours differ, at #j itself
    for j in 0..keys.len() as u64 - 2 {
        let (p, lines_up) = s.skip_shows_at(j, 1);
        let mut q = j as usize;
        while keys[q] == keys[q + 1] {
            q += 1;
        }
        assert_eq!((p, lines_up), (q as u64, true), "#{j}");
    }
    // skipping the last two calls: nothing after them, a stop
    let last = keys.len() as u64 - 2;
    assert!(!s.skip_shows_at(last, 2).1);
}

#[test]
fn skip_extra_and_swap_change_the_rank_s_collectives_as_said() {
    let s = spec(12);
    let colls = |f: Fault, rank: usize| -> Vec<String> {
        let text = String::from_utf8(s.render(f)[rank].1.clone()).unwrap();
        text.lines()
            .filter(|l| {
                l.contains(": opCount ") && !l.contains(" Send: ") && !l.contains(" Recv: ")
            })
            .map(|l| {
                let msg = &l[l.find("NCCL INFO ").unwrap() + 10..];
                // the op and its contract fields, without opCount and pointers
                let op = msg.split(':').next().unwrap().to_string();
                let field = |k: &str| {
                    let i = msg.find(&format!(" {k} ")).unwrap() + k.len() + 2;
                    msg[i..].split(' ').next().unwrap().to_string()
                };
                format!(
                    "{op} {} {} {} {}",
                    field("count"),
                    field("datatype"),
                    field("op"),
                    field("root")
                )
            })
            .collect()
    };
    let clean = colls(Fault::None, 2);
    let skip = colls(
        Fault::Skip {
            rank: 2,
            at: 5,
            calls: 3,
        },
        2,
    );
    assert_eq!(skip, [&clean[..5], &clean[8..]].concat());
    let extra = colls(Fault::Extra { rank: 2, at: 5 }, 2);
    assert_eq!(extra[5], "AllReduce 123456789 7 0 0");
    assert_eq!([&extra[..5], &extra[6..]].concat(), clean);
    let swap = colls(Fault::Swap { rank: 2, at: 5 }, 2);
    let mut swapped = clean.clone();
    swapped.swap(5, 6);
    assert_eq!(swap, swapped);
    // the other ranks are untouched
    assert_eq!(
        colls(
            Fault::Skip {
                rank: 2,
                at: 5,
                calls: 3
            },
            1
        ),
        colls(Fault::None, 1)
    );
}
