//! The JSON of `predictio_stats()`: a serde serializer for structs of
//! numbers, booleans and strings (the counters), so that the extension
//! does not link serde_json and its number formatting (6 % of the file,
//! read by every cold load).
//!
//! Output is compact JSON, as `serde_json::to_string` writes it; sequences,
//! maps, byte strings and enum variants with data are refused.

use std::fmt::{self, Write};

use serde::Serialize;
use serde::ser::{self, Impossible};

/// Why a value could not be written (it has a part this writer refuses).
#[derive(Debug, PartialEq, Eq)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

/// `value` as compact JSON.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    let mut out = String::new();
    value.serialize(&mut Writer { out: &mut out })?;
    Ok(out)
}

/// A JSON object of one string member: `{"key":"value"}`.
pub fn object_of_string(key: &str, value: &str) -> String {
    let mut out = String::from("{");
    push_string(&mut out, key);
    out.push(':');
    push_string(&mut out, value);
    out.push('}');
    out
}

fn push_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn refused(what: &str) -> Error {
    Error(format!("{what} are not written"))
}

struct Writer<'a> {
    out: &'a mut String,
}

impl Writer<'_> {
    fn number(&mut self, n: impl fmt::Display) -> Result<(), Error> {
        let _ = write!(self.out, "{n}");
        Ok(())
    }
}

/// The members of a struct being written.
struct Members<'w, 'a> {
    writer: &'w mut Writer<'a>,
    first: bool,
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Impossible<(), Error>;
    type SerializeTuple = Impossible<(), Error>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Impossible<(), Error>;
    type SerializeStruct = Members<'w, 'a>;
    type SerializeStructVariant = Impossible<(), Error>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.number(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.number(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.number(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.number(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.number(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.number(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.number(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.number(v)
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.serialize_f64(f64::from(v))
    }
    /// Finite numbers in Rust's shortest round-trip form (`1.5`, `3.0`,
    /// `1e-7`), others `null`, as serde_json writes them.
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        if v.is_finite() { self.number(format_args!("{v:?}")) } else { self.serialize_unit() }
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        push_string(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Error> {
        Err(refused("byte strings"))
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.out.push_str("null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Error> {
        Err(refused("enum variants with data"))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(refused("sequences"))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        Err(refused("tuples"))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Error> {
        Err(refused("tuple structs"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(refused("enum variants with data"))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(refused("maps"))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
        self.out.push('{');
        Ok(Members { writer: self, first: true })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(refused("enum variants with data"))
    }
}

impl ser::SerializeStruct for Members<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        if !self.first {
            self.writer.out.push(',');
        }
        self.first = false;
        push_string(self.writer.out, key);
        self.writer.out.push(':');
        value.serialize(&mut *self.writer)
    }

    fn end(self) -> Result<(), Error> {
        self.writer.out.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Inner {
        n: u64,
        flag: bool,
        ratio: f64,
        none: Option<u32>,
    }

    #[derive(Serialize)]
    struct Outer {
        name: &'static str,
        big: u64,
        negative: i64,
        inner: Inner,
        infinite: f64,
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let value = Outer {
            name: "a \"quoted\" \\ name\n\t\u{1}\u{8}\u{c}é",
            big: u64::MAX,
            negative: i64::MIN,
            inner: Inner { n: 7, flag: true, ratio: 3.0, none: None },
            infinite: f64::INFINITY,
        };
        assert_eq!(to_string(&value), Ok(serde_json::to_string(&value).expect("serde_json")));
    }

    #[test]
    fn the_stats_are_what_serde_json_writes() {
        let stats = crate::PrefetchStats {
            events: 1,
            requests: 2,
            refused: 3,
            reads_observed: 4,
            reads_unobserved: 5,
            warm_spells: 6,
            executor: predictio::accounting::Counters { requested_pages: 8, issued_pages: 9, ..Default::default() },
        };
        assert_eq!(to_string(&stats), Ok(serde_json::to_string(&stats).expect("serde_json")));
    }

    #[test]
    fn an_error_object_escapes_its_message() {
        let text = object_of_string("error", "no \"runtime\"");
        assert_eq!(text, serde_json::json!({ "error": "no \"runtime\"" }).to_string());
    }

    #[test]
    fn sequences_are_refused() {
        assert!(to_string(&vec![1, 2]).is_err());
    }
}
