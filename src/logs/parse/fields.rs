//! Whitespace tokens and the numbers NCCL prints (decimal, `%lx` hex,
//! `%p` pointers), read from bytes without allocating.

pub(super) struct TokensRev<'a> {
    s: &'a [u8],
    end: usize,
}

impl<'a> TokensRev<'a> {
    pub(super) fn new(s: &'a [u8]) -> Self {
        TokensRev { s, end: s.len() }
    }

    pub(super) fn next_with_start(&mut self) -> Option<(&'a [u8], usize)> {
        while self.end > 0 && self.s[self.end - 1] == b' ' {
            self.end -= 1;
        }
        if self.end == 0 {
            return None;
        }
        let mut start = self.end;
        while start > 0 && self.s[start - 1] != b' ' {
            start -= 1;
        }
        let tok = &self.s[start..self.end];
        self.end = start;
        Some((tok, start))
    }

    pub(super) fn next(&mut self) -> Option<&'a [u8]> {
        self.next_with_start().map(|(t, _)| t)
    }
}

/// Whitespace tokens from the left.
pub(super) struct Tokens<'a> {
    s: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Tokens<'a> {
    pub(super) fn new(s: &'a [u8]) -> Self {
        Tokens { s, pos: 0 }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.s;
        let mut p = self.pos;
        while p < s.len() && s[p] == b' ' {
            p += 1;
        }
        if p >= s.len() {
            self.pos = p;
            return None;
        }
        // Tokens are short: a plain loop beats a vectorised search here.
        let mut end = p;
        while end < s.len() && s[end] != b' ' {
            end += 1;
        }
        self.pos = end;
        Some(&s[p..end])
    }
}

pub(super) fn parse_i64_prefix(t: &[u8]) -> Option<i64> {
    let sign = usize::from(t.first() == Some(&b'-'));
    let digits = t[sign..].iter().take_while(|b| b.is_ascii_digit()).count();
    parse_i64(&t[..sign + digits])
}

#[inline]
pub(super) fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

#[inline]
pub(super) fn parse_u32(s: &[u8]) -> Option<u32> {
    parse_u64(s).and_then(|v| u32::try_from(v).ok())
}

#[inline]
pub(super) fn parse_i64(s: &[u8]) -> Option<i64> {
    match s {
        [b'-', digits @ ..] => parse_u64(digits)
            .and_then(|v| i64::try_from(v).ok())
            .map(|v| -v),
        _ => parse_u64(s).and_then(|v| i64::try_from(v).ok()),
    }
}

#[inline]
pub(super) fn parse_i32(s: &[u8]) -> Option<i32> {
    parse_i64(s).and_then(|v| i32::try_from(v).ok())
}

/// Hex digits, with or without `0x` (opCount is printed with `%lx`).
#[inline]
pub(super) fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = s
        .strip_prefix(b"0x")
        .or_else(|| s.strip_prefix(b"0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

/// printf `%p`: `0x7fd796e00000` or `(nil)`.
#[inline]
pub(super) fn parse_ptr(s: &[u8]) -> Option<u64> {
    match s {
        b"(nil)" | b"nil" | b"0" => Some(0),
        [b'0', b'x' | b'X', ..] => parse_hex(s),
        _ => None,
    }
}
