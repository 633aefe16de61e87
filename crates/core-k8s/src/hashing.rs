//! Hashes for in-process maps that only compare what they keep (an object's key, what a
//! layer last showed, an Event's identity), so they keep a number instead of the text.

use std::hash::{DefaultHasher, Hash, Hasher};

/// A 64-bit hash of `value`: for keys where two values sharing one costs at most a spurious
/// wake-up or lookup.
pub fn hash64<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// A 128-bit fingerprint of `value` (two 64-bit hashes under different salts): for keys where
/// two values sharing one would merge what should stay apart.
pub fn fingerprint128<T: Hash + ?Sized>(value: &T) -> (u64, u64) {
    (hash64(&(0u8, value)), hash64(&(1u8, value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_hash_alike_and_the_two_halves_differ() {
        assert_eq!(hash64("a/web"), hash64("a/web"));
        assert_ne!(hash64(&("a", "web")), hash64(&("b", "web")));
        let (first, second) = fingerprint128("note");
        assert_eq!((first, second), fingerprint128("note"));
        assert_ne!(first, second);
        assert_ne!(fingerprint128("note"), fingerprint128("other note"));
    }
}
