//! The tier's table and host grouping.

use super::table::TABLE;
use super::*;

fn mixed() -> Table {
    Table {
        shares: vec![
            Ok(b"calls A".to_vec()),
            Err(Missing::Timeout),
            Ok(b"calls B".to_vec()),
            Ok(b"calls A".to_vec()),
            Err(Missing::Finished { reason: None }),
            Err(Missing::Finished {
                reason: Some("it broke".into()),
            }),
        ],
        notes: vec![
            None,
            Some(b"AllReduce (opCount 3)".to_vec()),
            None,
            None,
            None,
            None,
        ],
    }
}

#[test]
fn tables_come_back_as_they_went() {
    let t = mixed();
    assert_eq!(Table::decode(&t.encode(), 6).unwrap(), t);
    // a value is sent once however many ranks posted it
    let alike = Table::of(vec![Ok(vec![7u8; 100]); 64]);
    let b = alike.encode();
    assert!(b.len() < 150, "{} bytes for 64 alike posts", b.len());
    assert_eq!(Table::decode(&b, 64).unwrap(), alike);
}

#[test]
fn a_table_cut_short_padded_or_of_another_size_is_refused() {
    let b = mixed().encode();
    for cut in 0..b.len() {
        assert!(Table::decode(&b[..cut], 6).is_err(), "cut at {cut}");
    }
    let mut longer = b.clone();
    longer.push(0);
    assert!(Table::decode(&longer, 6).is_err());
    assert!(Table::decode(&b, 5).is_err());
    assert!(Table::decode(&b, 7).is_err());
}

#[test]
fn hosts_group_in_the_order_of_their_lowest_rank() {
    assert_eq!(
        group(&[7, 7, 3, 7, 3, 9]),
        vec![vec![0, 1, 3], vec![2, 4], vec![5]]
    );
    let id = |d: &str| identity(Path::new(d));
    assert_eq!(id("/dev/shm"), id("/dev/shm"));
    assert_ne!(id("/dev/shm/a"), id("/dev/shm/b"));
}

#[test]
fn posted_identities_become_hosts_and_a_garbled_one_is_named() {
    let post = |id: u64| id.to_le_bytes().to_vec();
    let hosts = hosts_of(&[post(5), post(9), post(5), post(9)]).unwrap();
    assert_eq!(hosts, vec![vec![0, 2], vec![1, 3]]);
    assert_eq!(place(&hosts, 3), (1, 1));
    assert_eq!(place(&hosts, 0), (0, 0));
    let e = hosts_of(&[post(5), vec![1, 2, 3]]).unwrap_err();
    assert_eq!(e.message, "rank 1's host identity is garbled (3 bytes)");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 300 },
        failure_persistence: None,
        ..Default::default()
    })]

    /// Whatever another process put in the store decodes or is
    /// refused: no panic, and no more entries than asked for.
    #[test]
    fn any_bytes_decode_or_are_refused(
        b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        n in 0usize..70,
    ) {
        if let Ok(t) = Table::decode(&b, n) {
            proptest::prop_assert_eq!(t.shares.len(), n);
        }
        let mut framed = TABLE.to_le_bytes().to_vec();
        framed.extend_from_slice(&(n as u32).to_le_bytes());
        framed.extend_from_slice(&b);
        if let Ok(t) = Table::decode(&framed, n) {
            proptest::prop_assert_eq!(t.shares.len(), n);
        }
    }
}
