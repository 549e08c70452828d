//! Canonical JSON: the encoding a `json:` (and `avro:`) target is fingerprinted in, written in one
//! parse into a tree and one write (see [`canonical_json`]).

use std::collections::BTreeMap;

use super::{Unfingerprintable, MAX_JSON_DEPTH};

/// [`canonical_json`] with the members at `ignore` (token paths) left out: an object member is
/// removed, an array element is skipped (the others keep their order). A path that leads
/// nowhere in this document removes nothing.
pub(super) fn canonical_json_without(text: &str, ignore: &[Vec<String>]) -> Result<Vec<u8>, Unfingerprintable> {
    if ignore.is_empty() {
        return canonical_json(text);
    }
    let mut node = parse_json(text)?;
    for path in ignore {
        node.remove(path);
    }
    let mut out = Vec::with_capacity(text.len());
    node.write(&mut out)?;
    Ok(out)
}

/// Writes the JSON text `text` canonically: object keys sorted (by their bytes, after
/// unescaping; a repeated key keeps its last value), no whitespace, strings unescaped and
/// re-escaped by serde_json (lone surrogates are refused, as serde_json refuses them in a
/// string), numbers and literals as written. Nesting deeper than [`MAX_JSON_DEPTH`] is refused.
///
/// One pass builds a tree of the value (bounded recursion: at most [`MAX_JSON_DEPTH`] frames),
/// a second writes it out, so each byte is handled a constant number of times. The output is
/// byte for byte what the previous, recursive re-parsing implementation wrote (pinned by
/// `known_fingerprints_are_kept` and compared on random documents by
/// `canonical_form_matches_the_previous_implementation`).
pub(super) fn canonical_json(text: &str) -> Result<Vec<u8>, Unfingerprintable> {
    let node = parse_json(text)?;
    let mut out = Vec::with_capacity(text.len());
    node.write(&mut out)?;
    Ok(out)
}

/// The tree of the JSON text `text` (see [`canonical_json`]).
fn parse_json(text: &str) -> Result<Node<'_>, Unfingerprintable> {
    let mut p = Parser { text, pos: 0 };
    p.skip_ws();
    let node = p.value(0)?;
    p.skip_ws();
    if p.pos != text.len() {
        return Err(Unfingerprintable::NotJson(format!(
            "trailing characters at byte {}",
            p.pos
        )));
    }
    Ok(node)
}

/// A parsed JSON value of [`canonical_json`].
enum Node<'a> {
    /// A number, `true`, `false` or `null`, as written.
    Literal(&'a str),
    /// A string, unescaped.
    String(std::borrow::Cow<'a, str>),
    /// An array.
    Array(Vec<Node<'a>>),
    /// An object, keys unescaped and sorted; a repeated key keeps its last value.
    Object(BTreeMap<std::borrow::Cow<'a, str>, Node<'a>>),
    /// An array element left out (`fingerprint.ignore`): written as nothing.
    Removed,
}

impl Node<'_> {
    /// Leaves out the member at `path` (tokens): an object's member is removed, an array's
    /// element becomes [`Node::Removed`] (so other paths keep their indices). Recursion is
    /// bounded by the path's length (a configuration constant).
    fn remove(&mut self, path: &[String]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        match self {
            Node::Object(members) if rest.is_empty() => {
                members.remove(first.as_str());
            }
            Node::Object(members) => {
                if let Some(child) = members.get_mut(first.as_str()) {
                    child.remove(rest);
                }
            }
            Node::Array(items) => {
                let index = (first == "0" || (!first.starts_with('0') && first.bytes().all(|b| b.is_ascii_digit())))
                    .then(|| first.parse::<usize>().ok())
                    .flatten();
                if let Some(item) = index.and_then(|i| items.get_mut(i)) {
                    if rest.is_empty() {
                        *item = Node::Removed;
                    } else {
                        item.remove(rest);
                    }
                }
            }
            _ => {}
        }
    }

    /// Appends the canonical form (recursion bounded by the parse's depth limit).
    fn write(&self, out: &mut Vec<u8>) -> Result<(), Unfingerprintable> {
        let bad = |e: serde_json::Error| Unfingerprintable::NotJson(e.to_string());
        match self {
            Node::Literal(t) => out.extend_from_slice(t.as_bytes()),
            Node::String(s) => serde_json::to_writer(&mut *out, s.as_ref()).map_err(bad)?,
            Node::Array(items) => {
                out.push(b'[');
                for (i, v) in items.iter().filter(|v| !matches!(v, Node::Removed)).enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    v.write(out)?;
                }
                out.push(b']');
            }
            Node::Removed => {}
            Node::Object(members) => {
                out.push(b'{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, k.as_ref()).map_err(bad)?;
                    out.push(b':');
                    v.write(out)?;
                }
                out.push(b'}');
            }
        }
        Ok(())
    }
}

/// A cursor over a JSON text for [`canonical_json`]. The text was validated as JSON by
/// serde_json already; the parser still refuses (never panics on) anything unexpected.
struct Parser<'a> {
    /// The text.
    text: &'a str,
    /// Byte position of the next unread byte.
    pos: usize,
}

impl<'a> Parser<'a> {
    /// An error at the current position.
    fn error(&self, what: &str) -> Unfingerprintable {
        Unfingerprintable::NotJson(format!("{what} at byte {}", self.pos))
    }

    /// The next unread byte.
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// Skips JSON white space (space, tab, line feed, carriage return).
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Consumes `b` (after white space) or fails.
    fn expect(&mut self, b: u8) -> Result<(), Unfingerprintable> {
        self.skip_ws();
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", b as char)))
        }
    }

    /// The value at the cursor, nested in `depth` arrays and objects of the target.
    fn value(&mut self, depth: usize) -> Result<Node<'a>, Unfingerprintable> {
        self.skip_ws();
        match self.peek() {
            Some(b'"') => Ok(Node::String(self.string()?)),
            Some(open @ (b'[' | b'{')) => {
                if depth >= MAX_JSON_DEPTH {
                    return Err(Unfingerprintable::NotJson(format!(
                        "nested deeper than {MAX_JSON_DEPTH} levels"
                    )));
                }
                self.pos += 1;
                if open == b'[' {
                    self.array(depth + 1)
                } else {
                    self.object(depth + 1)
                }
            }
            Some(_) => self.literal(),
            None => Err(self.error("expected a value")),
        }
    }

    /// The members of an array whose `[` was consumed.
    fn array(&mut self, depth: usize) -> Result<Node<'a>, Unfingerprintable> {
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Node::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Node::Array(items));
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    /// The members of an object whose `{` was consumed.
    fn object(&mut self, depth: usize) -> Result<Node<'a>, Unfingerprintable> {
        let mut members = BTreeMap::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Node::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a key"));
            }
            let key = self.string()?;
            self.expect(b':')?;
            let v = self.value(depth)?;
            members.insert(key, v);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Node::Object(members));
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    /// The string at the cursor (at its `"`), unescaped. Without escapes it is borrowed; with
    /// them, serde_json unescapes it (and refuses what it refuses in a string: invalid escapes,
    /// lone surrogates, control characters).
    fn string(&mut self) -> Result<std::borrow::Cow<'a, str>, Unfingerprintable> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let mut i = start + 1;
        let mut plain = true;
        loop {
            match bytes.get(i) {
                Some(b'"') => break,
                Some(b'\\') => {
                    plain = false;
                    i += 2;
                }
                Some(c) => {
                    plain &= *c >= 0x20;
                    i += 1;
                }
                None => return Err(self.error("unterminated string")),
            }
        }
        self.pos = i + 1;
        let token = self.text.get(start..=i).ok_or_else(|| self.error("string"))?;
        if plain {
            let inner = token.strip_prefix('"').and_then(|t| t.strip_suffix('"'));
            return inner
                .map(std::borrow::Cow::Borrowed)
                .ok_or_else(|| self.error("string"));
        }
        serde_json::from_str::<String>(token)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| Unfingerprintable::NotJson(e.to_string()))
    }

    /// A number, `true`, `false` or `null`, as written (checked by serde_json's validation of the
    /// document; here only delimited).
    fn literal(&mut self) -> Result<Node<'a>, Unfingerprintable> {
        let start = self.pos;
        while matches!(
            self.peek(),
            Some(b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'+' | b'-' | b'.')
        ) {
            self.pos += 1;
        }
        match self.text.get(start..self.pos) {
            Some(t) if !t.is_empty() => Ok(Node::Literal(t)),
            _ => Err(self.error("expected a value")),
        }
    }
}
