//! JSON log lines: a serde [`Serializer`] for flat JSON objects, whose values are strings,
//! numbers, booleans, `null`s or unit enum variants, written straight into a byte buffer in the
//! bytes serde_json writes for the same value.
//!
//! It exists for cost (an access line per request): serde_json inspects every byte of every key
//! and string one at a time for a character to escape, and reaches a flattened struct's fields
//! through four calls each. Here
//! - a string is checked 8 bytes at a time and copied whole when nothing in it needs escaping
//!   (ids, names, paths: nearly always); one that does is escaped by serde_json;
//! - a field name is quoted once per thread and position (`KeyCache`): the next line of the
//!   same shape copies `,"name":` as it is; so is a field whose value is fixed too ([`Text::Fixed`]:
//!   a log line's level, target and message), copied as `,"name":"value"`;
//! - a number of milliseconds to the microsecond (`182.411`) is written directly, any other
//!   number by serde_json.
//!
//! A value that is not flat (a sequence, a nested map, a newtype variant) is refused with
//! [`Error::NotFlat`].

use serde::ser::{self, Impossible, Serialize, Serializer};
use std::fmt;
use std::ops::Range;

/// Why a value could not be written.
#[derive(Debug)]
pub enum Error {
    /// The value is not flat (a sequence, a nested map) or a field is not a struct or map.
    NotFlat,
    /// The value's own `Serialize` failed.
    Custom(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFlat => f.write_str("not a flat JSON object"),
            Error::Custom(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::Custom(msg.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Custom(e.to_string())
    }
}

/// Whether serde_json would escape a byte of `text`: a control character, `"` or `\\`.
/// Checked 8 bytes at a time, the last word overlapping the one before it (4 bytes at a time
/// below 8 bytes), so that a key or an id takes a handful of instructions.
#[inline(always)]
fn needs_escape(text: &[u8]) -> bool {
    let found = match text.len() {
        0..4 => return text.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\'),
        4..8 => {
            let half = |chunk: Option<&[u8; 4]>| chunk.map_or(0, |c| u32::from_le_bytes(*c));
            let word = half(text.first_chunk()) as u64 | (half(text.last_chunk()) as u64) << 32;
            escapes_in(word)
        }
        _ => {
            let word = |chunk: Option<&[u8; 8]>| chunk.map_or(0, |c| u64::from_le_bytes(*c));
            let mut found = escapes_in(word(text.last_chunk()));
            let mut rest = text;
            while let Some((head, tail)) = rest.split_first_chunk::<8>() {
                found |= escapes_in(u64::from_le_bytes(*head));
                rest = tail;
            }
            found
        }
    };
    found != 0
}

/// Non-zero when a byte of `word` is a control character, `"` or `\\`: the "has a byte less
/// than n" test of Bit Twiddling Hacks, exact as a yes or no for n ≤ 128 (a borrow that could
/// flag another byte only starts at a byte that is below n).
const fn escapes_in(word: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    const fn below(word: u64, n: u8) -> u64 {
        word.wrapping_sub(ONES * n as u64) & !word & (ONES * 0x80)
    }
    below(word, 0x20)
        | below(word ^ (ONES * b'"' as u64), 1)
        | below(word ^ (ONES * b'\\' as u64), 1)
}

/// Appends `text` as a JSON string (inlined: it is most of the work of a line).
#[inline(always)]
fn push_str(out: &mut Vec<u8>, text: &str) -> Result<(), Error> {
    if needs_escape(text.as_bytes()) {
        return push_escaped(out, text);
    }
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
    Ok(())
}

/// Appends `text`, which has characters to escape, as serde_json writes it.
#[cold]
fn push_escaped(out: &mut Vec<u8>, text: &str) -> Result<(), Error> {
    Ok(serde_json::to_writer(out, text)?)
}

/// Appends `value` as serde_json writes it: the shortest text that reads back as the same
/// `f64`. A number below [`SHORT_DECIMAL_LIMIT`] that is a whole number of thousandths but not
/// a whole number (a duration in milliseconds, to the microsecond) is written here: its
/// shortest text is its integer part, a dot and its one to three decimals. Anything else is
/// written by serde_json.
fn push_f64(out: &mut Vec<u8>, value: f64) -> Result<(), Error> {
    let magnitude = value.abs();
    if magnitude < SHORT_DECIMAL_LIMIT {
        // Rounded to the nearest thousandth with a cast, not `f64::round` (a library call).
        // (Signed: an `f64` converts to and from `i64` in one instruction, `u64` takes more.)
        let thousandths = (magnitude * 1000.0 + 0.5) as i64;
        if thousandths % 1000 != 0 && thousandths as f64 / 1000.0 == magnitude {
            push_thousandths(out, value < 0.0, thousandths.unsigned_abs());
            return Ok(());
        }
    }
    push_json(out, &value)
}

/// Below this magnitude two `f64`s are closer than 0.001 apart, so no shorter text than its
/// decimals reads back as a number with three decimals or fewer.
const SHORT_DECIMAL_LIMIT: f64 = 1e12;

/// Writes `thousandths` / 1000 (not a whole number) as decimal text, `-` first if `negative`.
fn push_thousandths(out: &mut Vec<u8>, negative: bool, thousandths: u64) {
    let mut text = [0u8; 24];
    let mut at = text.len();
    let mut rest = thousandths;
    let mut decimals = 3;
    while rest % 10 == 0 {
        rest /= 10;
        decimals -= 1;
    }
    for _ in 0..decimals {
        at -= 1;
        text[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    at -= 1;
    text[at] = b'.';
    loop {
        at -= 1;
        text[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if negative {
        at -= 1;
        text[at] = b'-';
    }
    out.extend_from_slice(&text[at..]);
}

/// Appends a number (or anything else serde_json writes as a scalar) as serde_json writes it.
fn push_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    Ok(serde_json::to_writer(out, value)?)
}

/// Where JSON objects are written, kept from one to the next: their bytes, and the field names
/// already quoted (`KeyCache`).
#[derive(Default)]
pub struct Buffer {
    /// The bytes written so far.
    pub bytes: Vec<u8>,
    keys: KeyCache,
}

impl Buffer {
    /// An empty buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Buffer {
            bytes: Vec::with_capacity(capacity),
            keys: KeyCache::default(),
        }
    }
}

/// A string value of a field: one known when the program was built is written once per thread
/// and position, with its key ([`Object::text_field`]).
#[derive(Debug, Clone, Copy)]
pub enum Text<'a> {
    /// The same text on every line (a level, a log target, a message).
    Fixed(&'static str),
    /// Any other text.
    Passing(&'a str),
}

impl Text<'_> {
    /// The text itself.
    pub fn as_str(&self) -> &str {
        match self {
            Text::Fixed(text) => text,
            Text::Passing(text) => text,
        }
    }
}

/// A JSON object being written, field by field.
pub struct Object<'a> {
    out: &'a mut Vec<u8>,
    keys: &'a mut KeyCache,
    /// How many fields were written.
    fields: usize,
}

impl<'a> Object<'a> {
    /// Starts an object at the end of `buffer`.
    pub fn open(buffer: &'a mut Buffer) -> Self {
        buffer.bytes.push(b'{');
        Object {
            out: &mut buffer.bytes,
            keys: &mut buffer.keys,
            fields: 0,
        }
    }

    /// Adds the field `key`, whose value must be flat.
    pub fn field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.static_key(key)?;
        value.serialize(Scalar { out: self.out })
    }

    /// Adds the field `key` with the string `value`; a [`Text::Fixed`] one is copied whole, key
    /// and value, from the `KeyCache` when the object before had the same field there.
    pub fn text_field(&mut self, key: &'static str, value: Text<'_>) -> Result<(), Error> {
        match value {
            Text::Fixed(fixed) => self.cached(key, Some(fixed)),
            Text::Passing(text) => self.field(key, text),
        }
    }

    /// Adds the fields of `value`, a struct or map of flat values, as this object's own.
    pub fn fields<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(Members(self))
    }

    /// Ends the object.
    pub fn close(self) {
        self.out.push(b'}');
    }

    /// Writes the separator, if any, and `key` with its quotes and colon.
    fn key(&mut self, key: &str) -> Result<(), Error> {
        if self.fields > 0 {
            self.out.push(b',');
        }
        self.fields += 1;
        push_str(self.out, key)?;
        self.out.push(b':');
        Ok(())
    }

    /// As [`Object::key`], for a key known when the program was built (a field name): copied
    /// from the `KeyCache` when the object before had the same key at this position.
    #[inline]
    fn static_key(&mut self, key: &'static str) -> Result<(), Error> {
        self.cached(key, None)
    }

    /// Writes `key` (and the fixed `value`, if any) as the `KeyCache` holds it at this position,
    /// or writes and caches it when the object before had another field there.
    #[inline]
    fn cached(&mut self, key: &'static str, value: Option<&'static str>) -> Result<(), Error> {
        match self.keys.get(self.fields, key, value) {
            Some(text) => {
                self.out.extend_from_slice(text);
                self.fields += 1;
                Ok(())
            }
            None => self.new_cached(key, value),
        }
    }

    /// [`Object::cached`] for a field not cached at this position: written and cached.
    #[cold]
    fn new_cached(&mut self, key: &'static str, value: Option<&'static str>) -> Result<(), Error> {
        let (at, start) = (self.fields, self.out.len());
        self.key(key)?;
        if let Some(value) = value {
            push_str(self.out, value)?;
        }
        self.keys.set(at, key, value, &self.out[start..]);
        Ok(())
    }
}

/// The keys of the last object written into a [`Buffer`], by position, with their punctuation
/// (`,"key":`), or with their fixed value too (`,"key":"value"`): an object with the same fields
/// in the same order (every access line) copies each from here instead of checking and quoting
/// it again. Only texts known when the program was built (`&'static str`) are kept, so the same
/// address and length always mean the same text.
#[derive(Default)]
struct KeyCache {
    /// The key at each position, its fixed value if it has one, and where its written text is
    /// in `text`.
    keys: Vec<(&'static str, Option<&'static str>, Range<usize>)>,
    text: Vec<u8>,
}

/// Past this many bytes of key text (objects of ever new shapes), the cache starts over.
const KEY_CACHE_BYTES: usize = 4096;

impl KeyCache {
    /// The text of `key` (with the fixed `value`, if any) at position `at`, if it is the field
    /// cached there.
    #[inline]
    fn get(&self, at: usize, key: &'static str, value: Option<&'static str>) -> Option<&[u8]> {
        let (cached, cached_value, range) = self.keys.get(at)?;
        let address = |text: Option<&'static str>| text.map(|t| t as *const str);
        if !std::ptr::eq(*cached, key) || address(*cached_value) != address(value) {
            return None;
        }
        self.text.get(range.clone())
    }

    /// Caches `text`, as written, for `key` (with its fixed `value`, if any) at position `at`.
    fn set(&mut self, at: usize, key: &'static str, value: Option<&'static str>, text: &[u8]) {
        if self.text.len() + text.len() > KEY_CACHE_BYTES {
            self.keys.clear();
            self.text.clear();
        }
        if at > self.keys.len() {
            // The positions before it are not cached.
            return;
        }
        let range = self.text.len()..self.text.len() + text.len();
        self.text.extend_from_slice(text);
        self.keys.truncate(at);
        self.keys.push((key, value, range));
    }
}

/// A struct or map whose fields join an [`Object`].
struct Members<'b, 'a>(&'b mut Object<'a>);

/// A field's value.
struct Scalar<'a> {
    out: &'a mut Vec<u8>,
}

/// A map key: only a string.
struct Key<'b, 'a>(&'b mut Object<'a>);

/// Serializer methods that refuse their kind of value with [`Error::NotFlat`].
macro_rules! not_flat {
    ($($method:ident($($arg:ty),*) -> $ret:ty;)*) => {
        $(fn $method(self, $(_: $arg),*) -> Result<$ret, Error> {
            Err(Error::NotFlat)
        })*
    };
}

/// Serializer methods for values other than strings and structures, refused by
/// [`Members`] and [`Key`].
macro_rules! only_structures {
    () => {
        not_flat! {
            serialize_bool(bool) -> Self::Ok;
            serialize_i8(i8) -> Self::Ok;
            serialize_i16(i16) -> Self::Ok;
            serialize_i32(i32) -> Self::Ok;
            serialize_i64(i64) -> Self::Ok;
            serialize_u8(u8) -> Self::Ok;
            serialize_u16(u16) -> Self::Ok;
            serialize_u32(u32) -> Self::Ok;
            serialize_u64(u64) -> Self::Ok;
            serialize_f32(f32) -> Self::Ok;
            serialize_f64(f64) -> Self::Ok;
            serialize_char(char) -> Self::Ok;
            serialize_bytes(&[u8]) -> Self::Ok;
            serialize_none() -> Self::Ok;
            serialize_unit() -> Self::Ok;
            serialize_unit_struct(&'static str) -> Self::Ok;
            serialize_unit_variant(&'static str, u32, &'static str) -> Self::Ok;
            serialize_seq(Option<usize>) -> Self::SerializeSeq;
            serialize_tuple(usize) -> Self::SerializeTuple;
            serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
            serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
            serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
        }
        fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<Self::Ok, Error> {
            Err(Error::NotFlat)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<Self::Ok, Error> {
            Err(Error::NotFlat)
        }
    };
}

impl<'b, 'a> Serializer for Members<'b, 'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Impossible<(), Error>;
    type SerializeTuple = Impossible<(), Error>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), Error>;

    only_structures!();

    fn serialize_str(self, _: &str) -> Result<(), Error> {
        Err(Error::NotFlat)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self, Error> {
        Ok(self)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Error> {
        Ok(self)
    }
}

impl ser::SerializeMap for Members<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        key.serialize(Key(self.0))
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(Scalar { out: self.0.out })
    }

    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStruct for Members<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.0.field(key, value)
    }

    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl Serializer for Key<'_, '_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Impossible<(), Error>;
    type SerializeTuple = Impossible<(), Error>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Impossible<(), Error>;
    type SerializeStruct = Impossible<(), Error>;
    type SerializeStructVariant = Impossible<(), Error>;

    only_structures!();
    not_flat! {
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct(&'static str, usize) -> Self::SerializeStruct;
    }

    fn serialize_str(self, key: &str) -> Result<(), Error> {
        self.0.key(key)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
}

impl Serializer for Scalar<'_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Impossible<(), Error>;
    type SerializeTuple = Impossible<(), Error>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Impossible<(), Error>;
    type SerializeStruct = Impossible<(), Error>;
    type SerializeStructVariant = Impossible<(), Error>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        push_json(self.out, &v)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        push_f64(self.out, v)
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        push_str(self.out, v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        push_str(self.out, v)
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        push_str(self.out, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    not_flat! {
        serialize_bytes(&[u8]) -> Self::Ok;
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct(&'static str, usize) -> Self::SerializeStruct;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Error> {
        Err(Error::NotFlat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Serialize;

    /// `value`'s fields as one object.
    fn flat(value: &impl Serialize) -> Result<String, Error> {
        let mut buffer = Buffer::default();
        let mut object = Object::open(&mut buffer);
        object.fields(value)?;
        object.close();
        Ok(String::from_utf8(buffer.bytes).unwrap())
    }

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        FirstKind,
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Every<'a> {
        text: &'a str,
        owned: String,
        absent: Option<&'a str>,
        present: Option<u16>,
        yes: bool,
        no: bool,
        small: i8,
        negative: i64,
        big: u64,
        huge: u128,
        half: f64,
        whole: f64,
        single: f32,
        not_finite: f64,
        letter: char,
        kind: Kind,
        unit: (),
        unit_struct: Unit,
        #[serde(rename = "renamed \"key\"\n")]
        renamed: u8,
    }

    #[test]
    fn writes_what_serde_json_writes_for_every_scalar() {
        let every = Every {
            text: "caf\u{e9} \"q\" \\ \u{1b}[0m /\u{7f}",
            owned: "x".repeat(40),
            absent: None,
            present: Some(404),
            yes: true,
            no: false,
            small: -8,
            negative: i64::MIN,
            big: u64::MAX,
            huge: u128::MAX,
            half: 0.5,
            whole: 2000.0,
            single: 1.25,
            not_finite: f64::NAN,
            letter: '"',
            kind: Kind::FirstKind,
            unit: (),
            unit_struct: Unit,
            renamed: 1,
        };
        assert_eq!(
            flat(&every).unwrap(),
            serde_json::to_string(&every).unwrap()
        );
        let empty: std::collections::BTreeMap<String, u8> = Default::default();
        assert_eq!(flat(&empty).unwrap(), "{}");
    }

    #[test]
    fn maps_and_flattened_structs_are_objects() {
        #[derive(Serialize)]
        struct Outer<'a> {
            a: &'a str,
            #[serde(flatten)]
            inner: Inner,
        }
        #[derive(Serialize)]
        struct Inner {
            b: Option<bool>,
            c: u8,
        }
        let outer = Outer {
            a: "x",
            inner: Inner { b: None, c: 3 },
        };
        assert_eq!(flat(&outer).unwrap(), r#"{"a":"x","b":null,"c":3}"#);
        let map = std::collections::BTreeMap::from([("k\tey", serde_json::json!("v"))]);
        assert_eq!(flat(&map).unwrap(), serde_json::to_string(&map).unwrap());
    }

    #[test]
    fn nested_values_are_not_flat() {
        let nested = serde_json::json!({ "a": [1, 2] });
        assert!(matches!(flat(&nested), Err(Error::NotFlat)));
        let nested = serde_json::json!({ "a": { "b": 1 } });
        assert!(matches!(flat(&nested), Err(Error::NotFlat)));
        assert!(matches!(flat(&"text"), Err(Error::NotFlat)));
        assert!(matches!(flat(&1u8), Err(Error::NotFlat)));
        let number_key = std::collections::BTreeMap::from([(1u8, 2u8)]);
        assert!(matches!(flat(&number_key), Err(Error::NotFlat)));
    }

    /// Field names, some of which need escaping.
    const NAMES: [&str; 6] = ["a", "timestamp", "q\"uote", "request_id", "tab\t", "b"];

    /// Fixed values for [`object_of`], some needing escapes.
    const FIXED: [&str; 5] = ["INFO", "sturnus::access", "q\"uote", "tab\t", ""];

    /// An object of fields `picks`, written by [`Object`] into `buffer` (kept from object to
    /// object), and as serde_json writes each key and value. A pick below `NAMES.len()` is that
    /// name with its position as a number; the next `NAMES.len()` picks the name with a
    /// [`Text::Fixed`] value, the ones after it with the same text as [`Text::Passing`].
    fn object_of(buffer: &mut Buffer, picks: &[usize]) -> (String, String) {
        let n = NAMES.len();
        let fixed = |pick: usize| FIXED[pick % FIXED.len()];
        buffer.bytes.clear();
        let mut object = Object::open(buffer);
        let mut fields = Vec::new();
        for (position, &pick) in picks.iter().enumerate() {
            let name = NAMES[pick % n];
            let value = match pick / n {
                0 => {
                    object.field(name, &position).unwrap();
                    position.to_string()
                }
                kind => {
                    let owned = fixed(pick).to_string();
                    let text = if kind == 1 {
                        Text::Fixed(fixed(pick))
                    } else {
                        Text::Passing(&owned)
                    };
                    object.text_field(name, text).unwrap();
                    serde_json::to_string(&owned).unwrap()
                }
            };
            fields.push(format!("{}:{value}", serde_json::to_string(name).unwrap()));
        }
        object.close();
        let ours = String::from_utf8(buffer.bytes.clone()).unwrap();
        (ours, format!("{{{}}}", fields.join(",")))
    }

    #[test]
    fn cached_keys_read_as_written_whatever_the_object_before() {
        let mut buffer = Buffer::default();
        for picks in [
            vec![0, 1, 2],
            vec![0, 1, 2],
            vec![1, 0],
            vec![0, 1, 2, 3, 4, 5],
            vec![],
            vec![2],
            vec![0, 1, 2, 3, 4, 5],
            vec![7, 8, 9, 0],
            vec![7, 8, 9, 0],
            vec![13, 14, 15, 0],
            vec![7, 14, 9, 0],
            vec![1, 8, 9, 0],
            vec![7, 8, 9, 0],
        ] {
            let (ours, expected) = object_of(&mut buffer, &picks);
            assert_eq!(ours, expected);
        }
        // Far more key text than the cache keeps.
        for round in 0..2000 {
            let picks: Vec<usize> = (0..8)
                .map(|i| (round + i * 7) % (NAMES.len() * 3))
                .collect();
            let (ours, expected) = object_of(&mut buffer, &picks);
            assert_eq!(ours, expected);
        }
    }

    #[test]
    fn durations_in_milliseconds_read_as_serde_json_writes_them() {
        for v in [
            0.001,
            0.5,
            1.234,
            2.345,
            12.345,
            999.999,
            1000.5,
            182.411,
            2310.07,
            -1.5,
            -0.001,
            1e12 - 0.5,
            1e12 + 0.5,
            0.1 + 0.2,
            2000.0,
            0.0,
            -0.0,
            1e-7,
            1e300,
            f64::NAN,
        ] {
            let mut out = Vec::new();
            push_f64(&mut out, v).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn any_sequence_of_objects_keeps_its_keys(
            objects in prop::collection::vec(prop::collection::vec(0..NAMES.len() * 3, 0..8), 1..12)
        ) {
            let mut buffer = Buffer::default();
            for picks in objects {
                let (ours, expected) = object_of(&mut buffer, &picks);
                prop_assert_eq!(ours, expected);
            }
        }

        #[test]
        fn any_f64_reads_as_serde_json_writes_it(v in any::<f64>()) {
            let mut out = Vec::new();
            push_f64(&mut out, v).unwrap();
            prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&v).unwrap());
        }

        #[test]
        fn any_count_of_thousandths_reads_as_serde_json_writes_it(
            n in 0u64..2_000_000_000_000_000, negative in any::<bool>()
        ) {
            let v = n as f64 / 1000.0 * if negative { -1.0 } else { 1.0 };
            let mut out = Vec::new();
            push_f64(&mut out, v).unwrap();
            prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&v).unwrap());
        }

        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(key in ".{0,40}", value in any::<String>()) {
            let map = std::collections::BTreeMap::from([(key, value)]);
            prop_assert_eq!(flat(&map).unwrap(), serde_json::to_string(&map).unwrap());
        }

        #[test]
        fn the_escape_check_finds_every_escaped_byte(
            bytes in prop::collection::vec(prop::sample::select(b"a \"\\\x00\x1f\x20\x7f\x80\xa2\xdc\xff/".to_vec()), 0..70)
        ) {
            let expected = bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
            prop_assert_eq!(needs_escape(&bytes), expected);
        }
    }
}
