//! Redis's glob patterns (KEYS, SCAN MATCH, CONFIG GET): `*` any bytes, `?` one byte,
//! `[abc]`, `[^abc]`, `[a-z]` classes, `\x` a literal `x`. Byte-wise and case-sensitive, as
//! Redis's `stringmatchlen`.
//!
//! Choice: matching is the iterative two-pointer algorithm with one backtrack point (the
//! last `*`), so it takes at most pattern × text steps on any input; Redis's recursive
//! matcher needed a depth limit against crafted patterns.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after the last `*`: (pattern index after it, text index it covers to).
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            if pattern[p] == b'*' {
                while p < pattern.len() && pattern[p] == b'*' {
                    p += 1;
                }
                if p == pattern.len() {
                    return true;
                }
                star = Some((p, t));
                continue;
            }
            if let Some(next) = match_one(pattern, p, text[t]) {
                p = next;
                t += 1;
                continue;
            }
        }
        // Mismatch: let the last `*` take one more byte, or fail.
        match star {
            Some((after_star, covered)) => {
                p = after_star;
                t = covered + 1;
                star = Some((after_star, covered + 1));
            }
            None => return false,
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

/// Whether the pattern element at `p` (not `*`) matches `c`: the index after the element.
fn match_one(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
    match pattern[p] {
        b'?' => Some(p + 1),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == c).then_some(p + 2),
        b'[' => {
            let mut i = p + 1;
            let negate = pattern.get(i) == Some(&b'^');
            if negate {
                i += 1;
            }
            let mut hit = false;
            while i < pattern.len() && pattern[i] != b']' {
                if pattern[i] == b'\\' && i + 1 < pattern.len() {
                    hit |= pattern[i + 1] == c;
                    i += 2;
                } else if pattern.get(i + 1) == Some(&b'-') && i + 2 < pattern.len() {
                    let (mut lo, mut hi) = (pattern[i], pattern[i + 2]);
                    if lo > hi {
                        std::mem::swap(&mut lo, &mut hi);
                    }
                    hit |= (lo..=hi).contains(&c);
                    i += 3;
                } else {
                    hit |= pattern[i] == c;
                    i += 1;
                }
            }
            // An unterminated class ends with the pattern, as in Redis.
            let end = (i + 1).min(pattern.len());
            (hit != negate).then_some(end)
        }
        literal => (literal == c).then_some(p + 1),
    }
}

/// The literal prefix every match of `pattern` starts with (to narrow a scan).
pub fn literal_prefix(pattern: &[u8]) -> Vec<u8> {
    let mut prefix = Vec::new();
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            b'*' | b'?' | b'[' => break,
            b'\\' if i + 1 < pattern.len() => {
                prefix.push(pattern[i + 1]);
                i += 2;
            }
            c => {
                prefix.push(c);
                i += 1;
            }
        }
    }
    prefix
}

/// The least key above every key that starts with `prefix`; None if there is none
/// (an empty prefix or all 0xff).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the matcher agrees with Redis on each pattern feature.
    // Method: a table of (pattern, text, expected) taken from Redis's documented behaviour.
    #[test]
    fn redis_glob_cases() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "anything", true),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "hllo", true),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h[a-b]llo", "hcllo", false),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("[\\]]", "]", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("*a", "bbba", true),
            ("user:*", "user:1", true),
            ("user:*", "users", false),
            ("[abc", "b", true),
            ("", "", true),
            ("", "a", false),
            ("abc", "ABC", false),
        ];
        for &(pattern, text, want) in cases {
            assert_eq!(
                matches(pattern.as_bytes(), text.as_bytes()),
                want,
                "{pattern:?} ~ {text:?}"
            );
        }
    }

    // Goal: a pattern built to make backtracking matchers explode finishes quickly.
    // Method: many stars against a long non-matching text.
    #[test]
    fn no_exponential_backtracking() {
        let pattern = "a*".repeat(50) + "b";
        let text = "a".repeat(10_000);
        assert!(!matches(pattern.as_bytes(), text.as_bytes()));
    }

    // Goal: prefixes and their ends bound exactly the keys a pattern can match.
    // Method: a few patterns and the 0xff carry.
    #[test]
    fn prefixes() {
        assert_eq!(literal_prefix(b"user:*"), b"user:");
        assert_eq!(literal_prefix(b"a\\*b?"), b"a*b");
        assert_eq!(literal_prefix(b"*x"), b"");
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
