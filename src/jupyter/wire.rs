//! The Jupyter wire format (messaging protocol 5.3): a message is a list of ZeroMQ frames —
//! routing identities, the `<IDS|MSG>` delimiter, the HMAC-SHA256 signature (hex) of the next
//! four frames, then header, parent header, metadata and content as JSON, then binary buffers.
//! Parsing verifies the signature and the JSON and never panics: whatever a peer sends, the
//! result is a message or a `WireError` to log.

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

pub const DELIMITER: &[u8] = b"<IDS|MSG>";
pub const PROTOCOL_VERSION: &str = "5.3";

/// The connection file's key. An empty key turns signing off (the protocol allows it).
#[derive(Clone)]
pub struct Key(Option<Hmac<Sha256>>);

impl Key {
    pub fn new(key: &str) -> Key {
        // HMAC takes a key of any length, so this cannot fail; an empty key means no signing.
        Key(if key.is_empty() { None } else { Hmac::<Sha256>::new_from_slice(key.as_bytes()).ok() })
    }

    /// The hex signature of `parts` in order ("" when signing is off).
    pub fn sign(&self, parts: &[&[u8]]) -> String {
        match &self.0 {
            None => String::new(),
            Some(mac) => {
                let mut mac = mac.clone();
                for p in parts {
                    mac.update(p);
                }
                hex::encode(mac.finalize().into_bytes())
            }
        }
    }

    /// Whether `signature` (hex) signs `parts`, compared in constant time.
    fn verify(&self, signature: &[u8], parts: &[&[u8]]) -> bool {
        match &self.0 {
            None => true,
            Some(mac) => {
                let Ok(expected) = hex::decode(signature) else { return false };
                let mut mac = mac.clone();
                for p in parts {
                    mac.update(p);
                }
                mac.verify_slice(&expected).is_ok()
            }
        }
    }
}

/// Why a list of frames is not a message.
#[derive(Debug, PartialEq, Eq)]
pub enum WireError {
    NoDelimiter,
    TooFewFrames(usize),
    BadSignature,
    BadJson { part: &'static str, error: String },
    NoMsgType,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::NoDelimiter => write!(f, "no `<IDS|MSG>` delimiter"),
            WireError::TooFewFrames(n) => write!(f, "{n} frames after the delimiter, expected at least 5"),
            WireError::BadSignature => write!(f, "the signature does not match the connection key"),
            WireError::BadJson { part, error } => write!(f, "the {part} is not a JSON object: {error}"),
            WireError::NoMsgType => write!(f, "the header has no `msg_type`"),
        }
    }
}

const PARTS: [&str; 4] = ["header", "parent header", "metadata", "content"];

#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The ROUTER socket's routing frames (a reply goes back through them), or an IOPub topic.
    pub identities: Vec<Bytes>,
    pub header: Value,
    pub parent_header: Value,
    pub metadata: Value,
    pub content: Value,
    pub buffers: Vec<Bytes>,
}

impl Message {
    /// Parses and verifies a received message.
    pub fn parse(frames: Vec<Bytes>, key: &Key) -> Result<Message, WireError> {
        let at = frames.iter().position(|f| &f[..] == DELIMITER).ok_or(WireError::NoDelimiter)?;
        let identities = frames[..at].to_vec();
        let rest = &frames[at + 1..];
        if rest.len() < 5 {
            return Err(WireError::TooFewFrames(rest.len()));
        }
        let signed: Vec<&[u8]> = rest[1..5].iter().map(|b| &b[..]).collect();
        if !key.verify(&rest[0], &signed) {
            return Err(WireError::BadSignature);
        }
        let mut json = Vec::with_capacity(4);
        for (part, bytes) in PARTS.iter().zip(&signed) {
            match serde_json::from_slice::<Value>(bytes) {
                Ok(v @ Value::Object(_)) => json.push(v),
                Ok(_) => return Err(WireError::BadJson { part, error: "not an object".into() }),
                Err(e) => return Err(WireError::BadJson { part, error: e.to_string() }),
            }
        }
        let [header, parent_header, metadata, content] = <[Value; 4]>::try_from(json)
            .map_err(|_| WireError::BadJson { part: "header", error: "missing parts".into() })?;
        if !header["msg_type"].is_string() {
            return Err(WireError::NoMsgType);
        }
        Ok(Message { identities, header, parent_header, metadata, content, buffers: rest[5..].to_vec() })
    }

    /// The frames to send, signed with `key`.
    pub fn frames(&self, key: &Key) -> Vec<Bytes> {
        let parts: Vec<Vec<u8>> = [&self.header, &self.parent_header, &self.metadata, &self.content]
            .iter()
            .map(|v| serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec()))
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let signature = key.sign(&refs);
        let mut frames = self.identities.clone();
        frames.push(Bytes::from_static(DELIMITER));
        frames.push(Bytes::from(signature));
        frames.extend(parts.into_iter().map(Bytes::from));
        frames.extend(self.buffers.iter().cloned());
        frames
    }

    pub fn msg_type(&self) -> &str {
        self.header["msg_type"].as_str().unwrap_or("")
    }

    /// A new message caused by the one with header `parent` (`Value::Null` for none), from the
    /// kernel's `session`.
    pub fn new(parent: &Value, msg_type: &str, content: Value, session: &str) -> Message {
        let parent_header = if parent.is_object() { parent.clone() } else { json!({}) };
        Message {
            identities: Vec::new(),
            header: header(msg_type, session),
            parent_header,
            metadata: json!({}),
            content,
            buffers: Vec::new(),
        }
    }

    /// The reply to this request (`x_request` → `x_reply`), routed back to its sender.
    pub fn reply(&self, content: Value, session: &str) -> Message {
        let msg_type = match self.msg_type().strip_suffix("_request") {
            Some(stem) => format!("{stem}_reply"),
            None => format!("{}_reply", self.msg_type()),
        };
        let mut m = Message::new(&self.header, &msg_type, content, session);
        m.identities = self.identities.clone();
        m
    }
}

fn header(msg_type: &str, session: &str) -> Value {
    json!({
        "msg_id": uuid::Uuid::new_v4().to_string(),
        "session": session,
        "username": "dp",
        "date": iso8601(SystemTime::now()),
        "msg_type": msg_type,
        "version": PROTOCOL_VERSION,
    })
}

/// An instant as ISO 8601 in UTC with microseconds (`2026-12-01T14:30:00.123456Z`), as the
/// protocol's `date` field wants.
pub fn iso8601(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's days-to-civil: proleptic Gregorian date of a day count since 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sample() -> Message {
        Message {
            identities: vec![Bytes::from_static(b"peer-1")],
            header: json!({"msg_id": "a", "msg_type": "execute_request", "session": "s", "username": "u",
                           "date": "2026-01-01T00:00:00Z", "version": "5.3"}),
            parent_header: json!({}),
            metadata: json!({}),
            content: json!({"code": "1 + 2", "silent": false}),
            buffers: Vec::new(),
        }
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_across_parts() {
        // RFC 4231, test case 2: the signature covers the parts as one concatenated message.
        let key = Key::new("Jefe");
        let expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(key.sign(&[b"what do ya want ", b"for nothing?"]), expected);
        assert!(key.verify(expected.as_bytes(), &[b"what do ya want for nothing?"]));
        assert!(!key.verify(expected.as_bytes(), &[b"what do ya want for nothing!"]));
        assert_eq!(Key::new("").sign(&[b"anything"]), "");
    }

    #[test]
    fn framing_is_identities_delimiter_signature_then_four_json_parts() {
        let key = Key::new("secret");
        let frames = sample().frames(&key);
        assert_eq!(frames.len(), 7);
        assert_eq!(&frames[0][..], b"peer-1");
        assert_eq!(&frames[1][..], DELIMITER);
        let parts: Vec<&[u8]> = frames[3..7].iter().map(|b| &b[..]).collect();
        assert_eq!(&frames[2][..], key.sign(&parts).as_bytes());
        assert_eq!(frames[2].len(), 64, "hex of a 32-byte digest");
        let content: Value = serde_json::from_slice(&frames[6]).unwrap();
        assert_eq!(content["code"], "1 + 2");
        assert_eq!(Message::parse(frames, &key).unwrap(), sample());
    }

    #[test]
    fn a_tampered_or_unsigned_message_is_refused() {
        let key = Key::new("secret");
        let mut frames = sample().frames(&key);
        frames[6] = Bytes::from_static(br#"{"code": "exit 1"}"#);
        assert_eq!(Message::parse(frames, &key), Err(WireError::BadSignature));
        let unsigned = sample().frames(&Key::new(""));
        assert_eq!(Message::parse(unsigned, &key), Err(WireError::BadSignature));
        let mut not_hex = sample().frames(&key);
        not_hex[2] = Bytes::from_static(b"zz");
        assert_eq!(Message::parse(not_hex, &key), Err(WireError::BadSignature));
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        let key = Key::new("");
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert_eq!(Message::parse(vec![b("x"), b("{}")], &key), Err(WireError::NoDelimiter));
        assert_eq!(Message::parse(vec![], &key), Err(WireError::NoDelimiter));
        let short = vec![b("<IDS|MSG>"), b(""), b("{}"), b("{}")];
        assert_eq!(Message::parse(short, &key), Err(WireError::TooFewFrames(3)));
        let bad_json = vec![b("<IDS|MSG>"), b(""), b("{\"msg_type\": "), b("{}"), b("{}"), b("{}")];
        assert!(matches!(Message::parse(bad_json, &key), Err(WireError::BadJson { part: "header", .. })));
        let array = vec![b("<IDS|MSG>"), b(""), b(r#"{"msg_type":"x"}"#), b("{}"), b("[]"), b("{}")];
        assert!(matches!(Message::parse(array, &key), Err(WireError::BadJson { part: "metadata", .. })));
        let untyped = vec![b("<IDS|MSG>"), b(""), b(r#"{"msg_id":"1"}"#), b("{}"), b("{}"), b("{}")];
        assert_eq!(Message::parse(untyped, &key), Err(WireError::NoMsgType));
        // Binary buffers after the content are kept.
        let with_buffer = vec![b("<IDS|MSG>"), b(""), b(r#"{"msg_type":"x"}"#), b("{}"), b("{}"), b("{}"), b("raw")];
        assert_eq!(Message::parse(with_buffer, &key).unwrap().buffers, vec![b("raw")]);
    }

    #[test]
    fn a_reply_goes_back_to_the_sender_with_the_request_as_parent() {
        let request = sample();
        let reply = request.reply(json!({"status": "ok"}), "kernel-session");
        assert_eq!(reply.msg_type(), "execute_reply");
        assert_eq!(reply.identities, request.identities);
        assert_eq!(reply.parent_header, request.header);
        assert_eq!(reply.header["session"], "kernel-session");
        assert_eq!(reply.header["version"], "5.3");
        assert_ne!(reply.header["msg_id"], request.header["msg_id"]);
    }

    #[test]
    fn dates_are_iso_8601_utc() {
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        // 2000-02-29 (a leap day of a century divisible by 400) is day 11016 since the epoch.
        let leap = UNIX_EPOCH + Duration::from_secs(11_016 * 86_400 + 3723) + Duration::from_micros(42);
        assert_eq!(iso8601(leap), "2000-02-29T01:02:03.000042Z");
    }
}
