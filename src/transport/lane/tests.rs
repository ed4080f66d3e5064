//! The lane's slots, notes and set-up, on real and anonymous segments.

use super::*;
use std::sync::Arc;

fn soon(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no file-backed mappings")]
fn posts_of_any_length_read_back_and_rounds_alternate_slots() {
    let dir = tempfile::tempdir().unwrap();
    let (a, path) = Lane::create(dir.path(), 3).unwrap();
    let b = Lane::open(dir.path(), name_of(&path), a.nonce(), 3).unwrap();
    for seq in 0..6u64 {
        let v: Vec<u8> = (0..(seq as usize * 5 + 1))
            .map(|i| (i as u8) ^ 0x5a)
            .collect();
        assert_eq!(b.read(1, seq), None, "round {seq} before its post");
        assert!(a.post(1, seq, &v));
        assert_eq!(b.read(1, seq), Some(Part::Value(v.clone())));
        // the previous round's slot is untouched by this one
        if seq > 0 {
            assert!(b.read(1, seq - 1).is_some());
        }
    }
    assert!(!a.post(2, 9, &vec![1u8; SLOT_BYTES + 1]));
    assert_eq!(b.read(2, 9), Some(Part::InStore));
    assert!(a.post(2, 10, &vec![7u8; SLOT_BYTES]));
    assert_eq!(b.read(2, 10), Some(Part::Value(vec![7u8; SLOT_BYTES])));
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no file-backed mappings")]
fn a_segment_with_another_nonce_or_size_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, path) = Lane::create(dir.path(), 2).unwrap();
    let name = name_of(&path);
    assert!(Lane::open(dir.path(), name, a.nonce() ^ 2, 2).is_err());
    assert!(Lane::open(dir.path(), name, a.nonce(), 3).is_err());
    let absent = file::name(1, 0xab);
    assert!(Lane::open(dir.path(), absent.as_bytes(), a.nonce(), 2).is_err());
}

/// Why a segment was not opened.
fn refusal(opened: std::io::Result<Lane>) -> std::io::Error {
    match opened {
        Ok(_) => panic!("the segment was opened"),
        Err(e) => e,
    }
}

fn name_of(path: &Path) -> &[u8] {
    path.file_name().unwrap().as_encoded_bytes()
}

/// The permission bits of the file at `path`.
fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Sets the process's umask, returning the one before.
fn umask(mask: u32) -> u32 {
    // SAFETY: umask takes a mode and cannot fail; it changes only which
    // permission bits later file creations leave out.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no file-backed mappings")]
fn a_segment_is_private_to_its_user_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    // the most permissive umasks: nothing taken away, or group write kept
    for mask in [0o000, 0o002] {
        let before = umask(mask);
        let made = Lane::create(dir.path(), 2);
        umask(before);
        let (_lane, path) = made.unwrap();
        assert_eq!(mode_of(&path), 0o600, "under umask {mask:03o}");
        std::fs::remove_file(path).unwrap();
    }
    // the strictest: still readable and writable by its user, so the
    // other ranks can map it
    let before = umask(0o277);
    let made = Lane::create(dir.path(), 2);
    umask(before);
    let (a, path) = made.unwrap();
    assert_eq!(mode_of(&path), 0o600);
    assert!(Lane::open(dir.path(), name_of(&path), a.nonce(), 2).is_ok());
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no file-backed mappings")]
fn a_symbolic_link_in_a_segments_place_is_never_followed() {
    let (dir, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // a real segment elsewhere, and a link to it under a segment's name
    let (a, target) = Lane::create(outside.path(), 2).unwrap();
    let name = file::name(77, 0x1234);
    let link = dir.path().join(&name);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = refusal(Lane::open(dir.path(), name.as_bytes(), a.nonce(), 2));
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
    // making one where a link already is (under this process's name for
    // the tag): refused, the link's target untouched
    let before = std::fs::read(&target).unwrap();
    let mine = dir.path().join(file::name(std::process::id(), 0x1234));
    std::os::unix::fs::symlink(&target, &mine).unwrap();
    let e = file::create(dir.path(), 0x1234, 4096).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), before);
    assert_eq!(mode_of(&target), 0o600);
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no file-backed mappings")]
fn a_file_others_may_read_or_that_is_no_file_is_not_a_segment() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (a, path) = Lane::create(dir.path(), 2).unwrap();
    for mode in [0o644, 0o660, 0o606] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = refusal(Lane::open(dir.path(), name_of(&path), a.nonce(), 2));
        assert!(e.to_string().contains(&format!("mode {mode:o}")), "{e}");
    }
    let sub = file::name(5, 0xcd);
    std::fs::create_dir(dir.path().join(&sub)).unwrap();
    assert!(Lane::open(dir.path(), sub.as_bytes(), a.nonce(), 2).is_err());
}

#[test]
fn a_name_from_a_peer_is_a_segments_name_or_nothing() {
    let made = file::name(4242, 0x0123_4567_89ab_cdef);
    assert_eq!(made, "rankwise-4242-0123456789abcdef");
    assert_eq!(valid_name(made.as_bytes()), Some(made.as_str()));
    assert!(valid_name(file::name(u32::MAX, 1).as_bytes()).is_some());
    for bad in [
        "",
        "/dev/shm/rankwise-4242-0123456789abcdef",
        "../rankwise-4242-0123456789abcdef",
        "rankwise-4242-0123456789abcdef/..",
        "rankwise-4242-../../../etc/pass",
        "rankwise-../0123456789abcdef",
        "rankwise-4242-0123456789ABCDEF",
        "rankwise-4242-0123456789abcde",
        "rankwise-4242-0123456789abcdef0",
        "rankwise--0123456789abcdef",
        "rankwise-12345678901-0123456789abcdef",
        "rankwise-4242-0123456789abcdef\0",
        "rankwise-42 2-0123456789abcdef",
        "rankwise-4242-0123456789abcdeg",
        "other-4242-0123456789abcdef",
    ] {
        assert_eq!(valid_name(bad.as_bytes()), None, "{bad:?}");
    }
    assert_eq!(valid_name(b"rankwise-1-0123456789abcd\xff\xfe"), None);
    assert_eq!(valid_name(b"rankwise-1-0123456789abcde\0"), None);
}

proptest::proptest! {
    // Under Miri (isolated: no current directory to keep failures in) the
    // property runs fewer cases and keeps none.
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 500 },
        failure_persistence: if cfg!(miri) { None } else { proptest::prelude::ProptestConfig::default().failure_persistence },
        ..Default::default()
    })]

    /// Whatever bytes a peer sends, a name taken is one component: no
    /// separator, no `..`, nothing but the name's own characters.
    #[test]
    fn no_bytes_make_a_name_that_leaves_the_directory(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
        pid in proptest::prelude::any::<u32>(),
        tag in proptest::prelude::any::<u64>(),
    ) {
        if let Some(name) = valid_name(&bytes) {
            proptest::prop_assert!(!name.contains('/') && !name.contains(".."));
            proptest::prop_assert_eq!(Path::new(name).components().count(), 1);
        }
        let made = file::name(pid, tag);
        proptest::prop_assert_eq!(valid_name(made.as_bytes()), Some(made.as_str()));
        // a made name with anything added before or after is not a name
        let mut longer = made.clone().into_bytes();
        longer.extend_from_slice(&bytes);
        proptest::prop_assert_eq!(valid_name(&longer).is_some(), bytes.is_empty());
    }
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no file-backed mappings")]
fn notes_keep_the_latest_cut_to_their_room() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Lane::create(dir.path(), 2).unwrap();
    assert_eq!(a.note(0), None);
    a.set_note(0, b"AllReduce (opCount 0)");
    a.set_note(0, b"Broadcast (opCount 1)");
    assert_eq!(a.note(0).unwrap(), b"Broadcast (opCount 1)");
    a.set_note(1, &[b'x'; 300]);
    assert_eq!(a.note(1).unwrap(), vec![b'x'; NOTE_BYTES]);
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no file-backed mappings")]
fn wait_ends_when_every_rank_posted_when_told_or_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let (ring, _) = Lane::create(dir.path(), 3).unwrap();
    let ring = Arc::new(ring);
    ring.post(0, 0, b"zero");
    let late = {
        let ring = ring.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            ring.post(1, 0, b"one");
            ring.post(2, 0, b"two");
        })
    };
    let got = ring.wait(0, soon(10_000), |_| None::<()>);
    late.join().unwrap();
    let want: Vec<Part> = [&b"zero"[..], b"one", b"two"]
        .iter()
        .map(|v| Part::Value(v.to_vec()))
        .collect();
    assert_eq!(got, Waited::All(want));
    // round 1: ranks 1 and 2 never post; the tick hears rank 1 left
    ring.post(0, 1, b"a");
    let t = Instant::now();
    let mut asked = Vec::new();
    let got = ring.wait(1, soon(5_000), |missing| {
        asked.push(missing.to_vec());
        missing.contains(&1).then_some("rank 1 left")
    });
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(asked, vec![vec![1, 2]]);
    assert_eq!(
        got,
        Waited::Stopped {
            by: Some("rank 1 left"),
            parts: vec![Some(Part::Value(b"a".to_vec())), None, None]
        }
    );
    // nobody tells: the deadline ends the wait, after a last tick
    let t = Instant::now();
    let mut ticks = 0;
    let got = ring.wait(1, soon(50), |_| {
        ticks += 1;
        None::<()>
    });
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert!(ticks >= 2, "{ticks}");
    assert!(matches!(got, Waited::Stopped { by: None, .. }), "{got:?}");
    // a withdrawn post is not there for a rank that comes later
    ring.withdraw(0, 1);
    assert_eq!(ring.read(0, 1), None);
    ring.post(1, 1, b"b");
    ring.post(2, 1, b"c");
    let got = ring.wait(1, soon(30), |_| None::<()>);
    assert!(
        matches!(&got, Waited::Stopped { by: None, parts } if parts[0].is_none()),
        "{got:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no file-backed mappings")]
fn words_are_read_into_fixed_strides_padded_and_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (ring, _) = Lane::create(dir.path(), 3).unwrap();
    let ring = Arc::new(ring);
    // the stride's worth of stale words must be overwritten, not kept
    let mut out = vec![u64::MAX; 3 * 4];
    let mut lens = vec![0; 3];
    ring.post_words(0, 4, &[1, 2]);
    ring.post_words(2, 4, &[5, 6, 7, 8, 9, 10]);
    let late = {
        let ring = ring.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            ring.post_words(1, 4, &[3]);
        })
    };
    let got = ring.wait_words(4, soon(10_000), |_| None::<()>, &mut out, &mut lens);
    late.join().unwrap();
    assert_eq!(got, Ok(()));
    assert_eq!(out, [1, 2, 0, 0, 3, 0, 0, 0, 5, 6, 7, 8]);
    assert_eq!(lens, [16, 8, 48], "a cut post says how long it was");
    // bytes and words are one lane: a post of bytes reads as words
    ring.post(0, 5, &[1, 0, 0, 0, 0, 0, 0, 0, 2]);
    let mut one = [9u64; 3];
    assert_eq!(ring.read_words(0, 5, &mut one), Some(9));
    assert_eq!(one, [1, 2, 0]);
    assert_eq!(ring.read_words(1, 5, &mut one), None);
    // a part of a post: from its second word, and past its end
    assert_eq!(ring.read_words_from(2, 4, 1, &mut one), Some(48));
    assert_eq!(one, [6, 7, 8]);
    assert_eq!(ring.read_words_from(2, 4, 4, &mut one), Some(48));
    assert_eq!(one, [9, 10, 0]);
    assert_eq!(ring.read_words_from(2, 4, 9, &mut one), Some(48));
    assert_eq!(one, [0, 0, 0]);
    // round 5: rank 1 never comes, rank 2 posted and took it back
    ring.post_words(2, 5, &[1]);
    ring.withdraw(2, 5);
    let got = ring.wait_words(5, soon(30), |_| None::<()>, &mut out, &mut lens);
    assert_eq!(
        got,
        Err(Stopped {
            by: None,
            posted: vec![true, false, false]
        })
    );
    // round 7: rank 2 posts, is seen, then gives up before the
    // deadline; it was there, so only rank 1 is missing
    ring.post_words(0, 7, &[4]);
    ring.post_words(2, 7, &[6]);
    let quitter = {
        let ring = ring.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(40));
            ring.withdraw(2, 7);
        })
    };
    let got = ring.wait_words(7, soon(120), |_| None::<()>, &mut out, &mut lens);
    quitter.join().unwrap();
    assert_eq!(
        got,
        Err(Stopped {
            by: None,
            posted: vec![true, false, true]
        })
    );
    assert_eq!(out[8], 6, "the post read before it was taken back");
}

/// Posts of every length and round, written by one thread and read by
/// another through the atomics alone, whole and in order: the accesses
/// every process makes to a real segment, on memory Miri can check.
#[test]
fn posts_cross_threads_whole_on_one_segment() {
    let lane = Lane::anonymous(2);
    let rounds = if cfg!(miri) { 6u64 } else { 200 };
    std::thread::scope(|s| {
        s.spawn(|| {
            for seq in 0..rounds {
                let v: Vec<u8> = (0..(seq as usize * 37 % 300 + 1))
                    .map(|i| (i as u8).wrapping_add(seq as u8))
                    .collect();
                lane.post(1, seq, &v);
                lane.set_note(1, format!("round {seq}").as_bytes());
                // the reader posts each round it read: round k + 2 may
                // reuse this slot only after that
                while lane.read(0, seq).is_none() {
                    std::thread::yield_now();
                }
            }
        });
        for seq in 0..rounds {
            let got = loop {
                if let Some(Part::Value(v)) = lane.read(1, seq) {
                    break v;
                }
                std::thread::yield_now();
            };
            let want: Vec<u8> = (0..(seq as usize * 37 % 300 + 1))
                .map(|i| (i as u8).wrapping_add(seq as u8))
                .collect();
            assert_eq!(got, want, "round {seq}");
            lane.post(0, seq, b"read");
        }
    });
    assert_eq!(
        lane.note(1).unwrap(),
        format!("round {}", rounds - 1).as_bytes()
    );
}

/// A withdrawn post is no longer there, and words read back padded.
#[test]
fn withdrawn_posts_and_words_on_one_segment() {
    let lane = Lane::anonymous(2);
    lane.post_words(0, 0, &[1, 2, 3]);
    let mut out = [0u64; 4];
    assert_eq!(lane.read_words(0, 0, &mut out), Some(24));
    assert_eq!(out, [1, 2, 3, 0]);
    lane.withdraw(0, 0);
    assert_eq!(lane.read(0, 0), None);
}
