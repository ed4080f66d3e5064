//! Who may use a store: the job's secret and the handshake that proves a
//! peer holds it. Every connection opens with it, before any request:
//!
//! 1. the server sends its hello: `rkws`, the protocol version (u16) and a
//!    fresh 32-byte nonce;
//! 2. the client answers with its proof: the owner id it speaks for (u32),
//!    its own 32-byte nonce, and HMAC-SHA256 under the key of the client
//!    label, both nonces and that owner;
//! 3. the server checks the MAC (in constant time) and answers with its own
//!    under the server label over the same values, so the client knows it
//!    reached the job's store and not a stranger on a recycled port. A
//!    wrong MAC closes the connection with nothing said and nothing kept.
//!
//! The nonces make every proof good for one connection only; the owner in
//! the MAC is what the server then binds the connection to. Pure functions
//! over byte arrays: the server and the client own the sockets.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The protocol's first bytes, then its version.
const MAGIC: &[u8; 4] = b"rkws";
const VERSION: u16 = 2;
const CLIENT_LABEL: &[u8] = b"rankwise store client";
const SERVER_LABEL: &[u8] = b"rankwise store server";

pub(super) const NONCE: usize = 32;
const MAC: usize = 32;
/// The server's hello: magic, version, nonce.
pub(super) const HELLO_LEN: usize = 4 + 2 + NONCE;
/// The client's proof: owner, nonce, MAC.
pub(super) const PROOF_LEN: usize = 4 + NONCE + MAC;
/// The server's answer to a good proof: its MAC.
pub(super) const ACCEPT_LEN: usize = MAC;

/// A job's secret: 32 random bytes that every rank of the job holds and
/// nobody else does. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// 32 bytes from the operating system's random source.
    pub fn random() -> crate::core::Result<Key> {
        let mut k = [0u8; 32];
        fill_random(&mut k)?;
        Ok(Key(k))
    }
    pub fn from_bytes(bytes: [u8; 32]) -> Key {
        Key(bytes)
    }
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    /// 64 lower-case hex digits (how the launcher hands it to its children).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    /// The key back from [`Key::to_hex`]'s text, or what is wrong with it.
    pub fn from_hex(text: &str) -> Result<Key, String> {
        let t = text.trim().as_bytes();
        if t.len() != 64 {
            return Err(format!(
                "expected 64 hex digits, got {} characters",
                t.len()
            ));
        }
        let mut k = [0u8; 32];
        for (i, pair) in t.chunks(2).enumerate() {
            let s = std::str::from_utf8(pair).map_err(|_| "not hex digits".to_string())?;
            k[i] = u8::from_str_radix(s, 16).map_err(|_| format!("{s:?} is not a hex byte"))?;
        }
        Ok(Key(k))
    }
}

/// Fills `buf` from the operating system's random source.
pub(super) fn fill_random(buf: &mut [u8]) -> crate::core::Result<()> {
    getrandom::fill(buf).map_err(|e| {
        crate::core::Error::new(
            crate::core::ErrorKind::System,
            format!("no random bytes from the operating system for the side channel: {e}"),
        )
    })
}

/// HMAC-SHA256 under `key` of `label`, `first`, `second` and `owner`.
fn mac(
    key: &Key,
    label: &[u8],
    first: &[u8; NONCE],
    second: &[u8; NONCE],
    owner: u32,
) -> Hmac<Sha256> {
    let mut m =
        <Hmac<Sha256> as KeyInit>::new_from_slice(&key.0).expect("HMAC takes a key of any length");
    m.update(label);
    m.update(first);
    m.update(second);
    m.update(&owner.to_le_bytes());
    m
}

/// The server's hello with its nonce.
pub(super) fn hello(nonce: &[u8; NONCE]) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[..4].copy_from_slice(MAGIC);
    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
    h[6..].copy_from_slice(nonce);
    h
}

/// The server's nonce from its hello, or why this is not a store of this
/// protocol.
pub(super) fn read_hello(h: &[u8; HELLO_LEN]) -> Result<[u8; NONCE], String> {
    if &h[..4] != MAGIC {
        return Err("it is not a rankwise store (its first bytes are not rankwise's)".into());
    }
    let v = u16::from_le_bytes([h[4], h[5]]);
    if v != VERSION {
        return Err(format!(
            "it speaks version {v} of the side channel's protocol, this rank {VERSION}"
        ));
    }
    Ok(h[6..].try_into().expect("32 bytes"))
}

/// The client's proof that it holds `key`, for `owner`, on the connection
/// whose server sent `server_nonce`.
pub(super) fn proof(
    key: &Key,
    server_nonce: &[u8; NONCE],
    client_nonce: &[u8; NONCE],
    owner: u32,
) -> [u8; PROOF_LEN] {
    let tag = mac(key, CLIENT_LABEL, server_nonce, client_nonce, owner)
        .finalize()
        .into_bytes();
    let mut p = [0u8; PROOF_LEN];
    p[..4].copy_from_slice(&owner.to_le_bytes());
    p[4..4 + NONCE].copy_from_slice(client_nonce);
    p[4 + NONCE..].copy_from_slice(&tag);
    p
}

/// A proof checked on the server: the owner it proves and the client's
/// nonce, or None when its MAC is not the key's.
pub(super) fn check_proof(
    key: &Key,
    server_nonce: &[u8; NONCE],
    p: &[u8; PROOF_LEN],
) -> Option<(u32, [u8; NONCE])> {
    let owner = u32::from_le_bytes(p[..4].try_into().expect("4 bytes"));
    let client_nonce: [u8; NONCE] = p[4..4 + NONCE].try_into().expect("32 bytes");
    mac(key, CLIENT_LABEL, server_nonce, &client_nonce, owner)
        .verify_slice(&p[4 + NONCE..])
        .ok()?;
    Some((owner, client_nonce))
}

/// The server's answer to a good proof.
pub(super) fn accept(
    key: &Key,
    server_nonce: &[u8; NONCE],
    client_nonce: &[u8; NONCE],
    owner: u32,
) -> [u8; ACCEPT_LEN] {
    mac(key, SERVER_LABEL, client_nonce, server_nonce, owner)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether the server's answer proves it holds `key` (constant time).
pub(super) fn check_accept(
    key: &Key,
    server_nonce: &[u8; NONCE],
    client_nonce: &[u8; NONCE],
    owner: u32,
    a: &[u8; ACCEPT_LEN],
) -> bool {
    mac(key, SERVER_LABEL, client_nonce, server_nonce, owner)
        .verify_slice(a)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_for_its_key_nonces_and_owner_only() {
        let key = Key::from_bytes([7; 32]);
        let (sn, cn) = ([1u8; NONCE], [2u8; NONCE]);
        let p = proof(&key, &sn, &cn, 5);
        assert_eq!(check_proof(&key, &sn, &p), Some((5, cn)));
        assert_eq!(
            check_proof(&Key::from_bytes([8; 32]), &sn, &p),
            None,
            "another key"
        );
        assert_eq!(
            check_proof(&key, &[3; NONCE], &p),
            None,
            "another connection"
        );
        let mut forged = p;
        forged[0] = 6; // the same MAC claimed for another owner
        assert_eq!(check_proof(&key, &sn, &forged), None);
        let a = accept(&key, &sn, &cn, 5);
        assert!(check_accept(&key, &sn, &cn, 5, &a));
        assert!(!check_accept(&key, &sn, &cn, 6, &a));
        assert!(!check_accept(&Key::from_bytes([8; 32]), &sn, &cn, 5, &a));
        // the server's answer is no client proof, and the other way round
        assert_ne!(a[..], p[4 + NONCE..]);
    }

    #[test]
    fn hellos_and_keys_round_trip_and_strangers_are_named() {
        let h = hello(&[9; NONCE]);
        assert_eq!(read_hello(&h), Ok([9; NONCE]));
        let mut other = h;
        other[4] = 1;
        assert!(read_hello(&other).unwrap_err().contains("version 1"));
        other[0] = b'x';
        assert!(
            read_hello(&other)
                .unwrap_err()
                .contains("not a rankwise store")
        );
        let k = Key::random().unwrap();
        assert_eq!(Key::from_hex(&k.to_hex()), Ok(k.clone()));
        assert_ne!(Key::random().unwrap(), k, "fresh bytes each time");
        assert!(Key::from_hex("abc").unwrap_err().contains("64 hex digits"));
        assert!(Key::from_hex(&"zz".repeat(32)).is_err());
        assert_eq!(format!("{k:?}"), "Key(..)");
    }
}
