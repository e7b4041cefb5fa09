//! The holder tag: which candidate of the config issued a Responses API object, carried in the
//! object's id so any sidecar with the same config sends its follow-ups to that candidate.
//!
//! A tagged id is the provider's own id followed by [`SUFFIX_LEN`] lowercase hex digits: the
//! candidate tag ([`TAG_LEN`], from the candidate's provider name and model) and a check
//! ([`CHECK_LEN`], over the provider's id and the tag). Both are SHA-256 prefixes, so every
//! sidecar with the same config derives the same tag, and an id altered anywhere (or made up)
//! fails the check.

use ring::digest::{digest, SHA256};

/// Hex digits of the candidate tag.
pub const TAG_LEN: usize = 6;
/// Hex digits of the check over the whole id.
pub const CHECK_LEN: usize = 10;
/// How many characters a tagged id is longer than the provider's own.
pub const SUFFIX_LEN: usize = TAG_LEN + CHECK_LEN;

/// Domain of the candidate tag's hash.
const TAG_DOMAIN: &[u8] = b"sturnus holder tag\0";
/// Domain of the check's hash.
const CHECK_DOMAIN: &[u8] = b"sturnus response id\0";

/// A candidate's tag: [`TAG_LEN`] lowercase hex digits derived from its provider name and model
/// (SHA-256 of a domain string, the name's length as 8 little-endian bytes, the name, the model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HolderTag([u8; TAG_LEN]);

impl HolderTag {
    /// The tag of the candidate (`provider`, `model`): the same on every sidecar.
    pub fn of(provider: &str, model: &str) -> HolderTag {
        let mut input = Vec::with_capacity(TAG_DOMAIN.len() + 8 + provider.len() + model.len());
        input.extend_from_slice(TAG_DOMAIN);
        input.extend_from_slice(&(provider.len() as u64).to_le_bytes());
        input.extend_from_slice(provider.as_bytes());
        input.extend_from_slice(model.as_bytes());
        let mut tag = [0u8; TAG_LEN];
        hex_prefix(&input, &mut tag);
        HolderTag(tag)
    }

    /// The tag's characters.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The [`SUFFIX_LEN`] characters appended to the provider's id `provider_id`.
    pub fn suffix(&self, provider_id: &[u8]) -> [u8; SUFFIX_LEN] {
        let mut out = [0u8; SUFFIX_LEN];
        out[..TAG_LEN].copy_from_slice(&self.0);
        check(provider_id, &self.0, &mut out[TAG_LEN..]);
        out
    }

    /// The tagged id the client sees for the provider's id `provider_id`.
    pub fn tag(&self, provider_id: &str) -> String {
        let suffix = self.suffix(provider_id.as_bytes());
        let mut out = String::with_capacity(provider_id.len() + SUFFIX_LEN);
        out.push_str(provider_id);
        out.push_str(std::str::from_utf8(&suffix).unwrap_or_default());
        out
    }
}

/// A tagged id taken apart: the provider's own id and the tag of the candidate holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Untagged<'a> {
    /// The id the provider issued.
    pub provider_id: &'a str,
    /// The tag of the candidate that issued it.
    pub holder: HolderTag,
}

/// Takes a tagged id apart; `None` when it carries no valid tag (too short, not hex where the
/// tag is, or its check does not match: an id from a direct call, altered, or made up).
pub fn untag(id: &str) -> Option<Untagged<'_>> {
    let split = id.len().checked_sub(SUFFIX_LEN).filter(|&n| n > 0)?;
    let (provider_id, suffix) = (id.get(..split)?, id.get(split..)?.as_bytes());
    if !suffix
        .iter()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&suffix[..TAG_LEN]);
    let mut expected = [0u8; CHECK_LEN];
    check(provider_id.as_bytes(), &tag, &mut expected);
    (expected == suffix[TAG_LEN..]).then_some(Untagged {
        provider_id,
        holder: HolderTag(tag),
    })
}

/// Writes the check of `provider_id` with `tag` as hex into `out`.
fn check(provider_id: &[u8], tag: &[u8; TAG_LEN], out: &mut [u8]) {
    let mut input = Vec::with_capacity(CHECK_DOMAIN.len() + provider_id.len() + TAG_LEN);
    input.extend_from_slice(CHECK_DOMAIN);
    input.extend_from_slice(provider_id);
    input.extend_from_slice(tag);
    hex_prefix(&input, out);
}

/// Fills `out` with the first `out.len()` lowercase hex digits of SHA-256 of `input`.
fn hex_prefix(input: &[u8], out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hash = digest(&SHA256, input);
    for (i, slot) in out.iter_mut().enumerate() {
        let byte = hash.as_ref()[i / 2];
        let nibble = if i % 2 == 0 { byte >> 4 } else { byte & 0xf };
        *slot = HEX[usize::from(nibble)];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_id_is_the_providers_id_and_sixteen_hex_digits_and_comes_apart_again() {
        let holder = HolderTag::of("openai", "gpt-4o-mini");
        let id = holder.tag("resp_67ccd2bed1ec8190");
        assert_eq!(id.len(), "resp_67ccd2bed1ec8190".len() + SUFFIX_LEN);
        assert!(id.starts_with("resp_67ccd2bed1ec8190"));
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        let back = untag(&id).expect("valid tag");
        assert_eq!(back.provider_id, "resp_67ccd2bed1ec8190");
        assert_eq!(back.holder, holder);
    }

    #[test]
    fn the_tag_depends_only_on_the_candidate() {
        assert_eq!(HolderTag::of("a", "m"), HolderTag::of("a", "m"));
        assert_ne!(HolderTag::of("a", "m"), HolderTag::of("b", "m"));
        assert_ne!(HolderTag::of("a", "m"), HolderTag::of("a", "n"));
        assert_ne!(HolderTag::of("a\0b", "m"), HolderTag::of("a", "b\0m"));
        assert_eq!(HolderTag::of("a", "m").as_str().len(), TAG_LEN);
    }

    #[test]
    fn an_altered_or_untagged_id_is_not_taken_apart() {
        let id = HolderTag::of("a", "m").tag("resp_1");
        for i in 0..id.len() {
            let mut altered = id.clone().into_bytes();
            altered[i] = if altered[i] == b'0' { b'1' } else { b'0' };
            let altered = String::from_utf8(altered).unwrap();
            assert_eq!(untag(&altered), None, "{altered}");
        }
        assert_eq!(untag("resp_67ccd2bed1ec8190b14f964abc054267"), None);
        assert_eq!(untag(""), None);
        assert_eq!(untag(&id[id.len() - SUFFIX_LEN..]), None);
        assert_eq!(untag(&format!("{id}0")), None);
        assert_eq!(untag("résumé_0123456789abcdef"), None);
    }
}
