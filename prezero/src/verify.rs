//! Checking that memory is zero: what every benchmark and verify mode relies on.

/// Whether every byte of `buf` is zero. Reads 64 bytes per step with no early
/// branch inside a step, so the compiler vectorises it.
pub fn is_zero(buf: &[u8]) -> bool {
    let mut lines = buf.chunks_exact(64);
    let body = lines
        .by_ref()
        .all(|l| l.iter().fold(0u8, |a, &b| a | b) == 0);
    body && lines.remainder().iter().all(|&b| b == 0)
}

/// The offset of the first non-zero byte: whole pages at `is_zero` speed, then
/// the one page that holds it byte by byte.
pub fn first_nonzero(buf: &[u8]) -> Option<usize> {
    let mut offset = 0;
    for block in buf.chunks(4096) {
        if !is_zero(block) {
            return block.iter().position(|&b| b != 0).map(|i| offset + i);
        }
        offset += block.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_position() {
        let mut v = vec![0u8; 9000];
        assert!(is_zero(&v));
        assert!(is_zero(&[]));
        for i in 0..v.len() {
            v[i] = 1;
            assert!(!is_zero(&v));
            assert_eq!(first_nonzero(&v), Some(i));
            v[i] = 0;
        }
    }
}
