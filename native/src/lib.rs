//! The plain chunk: the shape nearly every streamed frame has, recognized and absorbed in one
//! compiled pass over a run of frames, without building a dict and without the interpreter lock.
//!
//! A plain chunk is a `chat.completion.chunk` with exactly one choice whose delta holds only a
//! content fragment and/or argument fragments of tool calls already begun (an index and
//! `function.arguments`; no id, type or name): no usage, no error, no role, refusal or reasoning,
//! no logprobs, no finish reason, no field this module does not name. `take_run` reads frames from
//! a position while each is plain for the assembler's state (the completion's id, the choices and
//! the calls begun) and stops at the first that is not; that frame and every later one are the
//! general path's (`worker.core.assembly`), which decides any frame, plain or not, the same way. Most
//! frames of a stream differ from an earlier one only in their content's string: such a frame is
//! checked against that one's bytes around it (`Template`) instead of being decoded again.
//!
//! Exactness: a frame is taken only when the whole document is JSON that orjson decodes to the
//! same values (serde_json is as strict: no NaN, no trailing text, no control characters or lone
//! surrogates in strings, valid UTF-8), and any doubt refuses it: a duplicate key, a float or an
//! integer beyond 64 bits anywhere, a value of another type, an unknown field. Refusing is always
//! safe, since the general path then decides the frame as before; taking must equal what the
//! general path would do (tests/test_assembly_properties.py holds the two together).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

const CHUNK_OBJECT: &str = "chat.completion.chunk";
/// A service tier longer than this (in characters) is not a name: the general path records it.
const TIER_CHARS: usize = 32;
/// Windows of fewer payload bytes than this are read holding the interpreter lock: releasing and
/// taking it back costs more than such a window's reading.
const RELEASE_BYTES: usize = 16 * 1024;

/// A JSON value the assembler never reads (`Any` in the plain chunk's shape), accepted only when
/// it holds no float and no integer beyond 64 bits: the values where decoders may differ.
struct Unread;

impl<'de> Deserialize<'de> for Unread {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UnreadVisitor)
    }
}

struct UnreadVisitor;

impl<'de> Visitor<'de> for UnreadVisitor {
    type Value = Unread;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value without floats")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Unread, E> {
        Ok(Unread)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Unread, E> {
        Ok(Unread)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Unread, E> {
        Ok(Unread)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Unread, E> {
        Ok(Unread)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Unread, E> {
        Ok(Unread)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unread, A::Error> {
        while seq.next_element::<Unread>()?.is_some() {}
        Ok(Unread)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unread, A::Error> {
        // Keys are strings in JSON; a duplicate key is taken by orjson as its last value, and is
        // refused here only where it names a field below (an unread object may repeat keys).
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value::<Unread>()?;
        }
        Ok(Unread)
    }
}

/// A field the plain chunk allows only as null or absent (`Option<Null>` is None then; any other
/// value fails the decoding).
type Null = Option<()>;

// Fields that must be null or absent are decoded only to be checked, never read.
#[allow(dead_code)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments<'a> {
    #[serde(borrow)]
    arguments: Cow<'a, str>,
    #[serde(default)]
    name: Null,
}

// Fields that must be null or absent are decoded only to be checked, never read.
#[allow(dead_code)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fragment<'a> {
    #[serde(borrow)]
    function: Arguments<'a>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Null,
    #[serde(default, rename = "type")]
    kind: Null,
}

// Fields that must be null or absent are decoded only to be checked, never read.
#[allow(dead_code)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Delta<'a> {
    // Kept raw: its place in the payload cuts the frame into a template (``Template``).
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<Fragment<'a>>>,
    #[serde(default)]
    role: Null,
    #[serde(default)]
    refusal: Null,
    #[serde(default)]
    reasoning_content: Null,
    #[serde(default)]
    reasoning: Null,
}

// Fields that must be null or absent are decoded only to be checked, never read.
#[allow(dead_code)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Choice<'a> {
    #[serde(borrow)]
    delta: Delta<'a>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    logprobs: Null,
    #[serde(default)]
    finish_reason: Null,
    // Provider additions seen on plain frames, not read by the assembler: OpenRouter, Azure, vLLM.
    #[serde(default)]
    native_finish_reason: Option<Unread>,
    #[serde(default)]
    content_filter_results: Option<Unread>,
    #[serde(default)]
    stop_reason: Option<Unread>,
}

// Fields that must be null or absent are decoded only to be checked, never read.
#[allow(dead_code)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Chunk<'a> {
    #[serde(borrow)]
    object: Cow<'a, str>,
    #[serde(borrow)]
    choices: Vec<Choice<'a>>,
    // Not a string: never the completion's id, so not plain (the general path counts it).
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    created: Option<Unread>,
    #[serde(default)]
    model: Option<Unread>,
    #[serde(default)]
    system_fingerprint: Option<Unread>,
    #[serde(default, borrow)]
    service_tier: Option<Cow<'a, str>>,
    #[serde(default)]
    obfuscation: Option<Unread>,
    #[serde(default)]
    provider: Option<Unread>,
    #[serde(default)]
    usage: Null,
    #[serde(default)]
    error: Null,
}

/// What a run of plain frames adds: the text of each (choice, call) touched, in the order first
/// touched (call -1 is the choice's content), and the last service tier named.
#[derive(Default)]
struct Run {
    taken: usize,
    tier: Option<String>,
    keys: HashMap<(u64, i64), usize>,
    pieces: Vec<(u64, i64, String)>,
}

impl Run {
    fn add(&mut self, choice: u64, call: i64, text: &str) {
        let slot = match self.keys.get(&(choice, call)) {
            Some(&slot) => slot,
            None => {
                self.pieces.push((choice, call, String::new()));
                self.keys.insert((choice, call), self.pieces.len() - 1);
                self.pieces.len() - 1
            }
        };
        self.pieces[slot].2.push_str(text);
    }
}

/// The assembler's state a plain frame is judged against: the completion's id and, for each
/// choice begun, the wire indices of its calls begun.
struct Seen<'a> {
    completion_id: Option<&'a str>,
    calls: HashMap<u64, Vec<u64>>,
}

/// A plain frame of content only, cut around its content's JSON string: a later frame made of the
/// same bytes before and after, with any JSON string between them, is the same document but for
/// the content's value (JSON admits any string where a string stands), so it is plain for the same
/// state and adds its content to the same choice, naming the same tier. Only within one run, whose
/// state does not change, and only for content-only frames, which no call begun bears on.
struct Template {
    payload: Vec<u8>,
    head: usize,
    tail: usize,
    choice: u64,
    tier: Option<String>,
}

impl Template {
    /// The content of `payload` when it is this template's with another string, else None.
    fn content(&self, payload: &[u8]) -> Option<String> {
        let (head, tail) = (self.head, self.tail);
        if payload.len() < head + tail + 2
            || payload[..head] != self.payload[..head]
            || payload[payload.len() - tail..] != self.payload[self.payload.len() - tail..]
        {
            return None;
        }
        serde_json::from_slice::<String>(&payload[head..payload.len() - tail]).ok()
    }
}

/// A frame's content: its JSON string decoded, or None when the value is not a string.
fn text_of(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(raw.get()).ok()
}

/// How many templates a run keeps (the choices of n > 1 interleave; each has its own).
const TEMPLATES: usize = 4;

/// Absorb `payload` into `run` when it is a plain chunk for `seen`; false, having changed
/// nothing, otherwise. A content-only frame decoded whole leaves its template in `templates`.
fn take(payload: &[u8], seen: &Seen, run: &mut Run, templates: &mut Vec<Template>) -> bool {
    for template in templates.iter() {
        if let Some(text) = template.content(payload) {
            if let Some(tier) = &template.tier {
                run.tier = Some(tier.clone());
            }
            run.add(template.choice, -1, &text);
            run.taken += 1;
            return true;
        }
    }
    let chunk: Chunk = match serde_json::from_slice(payload) {
        Ok(chunk) => chunk,
        Err(_) => return false,
    };
    if chunk.object != CHUNK_OBJECT || chunk.choices.len() != 1 {
        return false;
    }
    if chunk.id.as_deref() != seen.completion_id {
        return false;
    }
    if let Some(tier) = &chunk.service_tier {
        if tier.chars().count() > TIER_CHARS {
            return false;
        }
    }
    let choice = &chunk.choices[0];
    let number = u64::from(choice.index.unwrap_or(0));
    let begun = seen.calls.get(&number);
    let content = match choice.delta.content {
        None => None,
        Some(raw) => match text_of(raw) {
            Some(text) => Some((raw, text)),
            None => return false,
        },
    };
    match (&choice.delta.tool_calls, begun) {
        (Some(_), None) => return false,
        (Some(fragments), Some(wires)) => {
            let open =
                |fragment: &Fragment| wires.contains(&u64::from(fragment.index.unwrap_or(0)));
            if !fragments.iter().all(open) {
                return false;
            }
        }
        (None, _) if content.is_none() => return false,
        (None, _) => {}
    }
    let tier = match &chunk.service_tier {
        Some(tier) if !tier.is_empty() => Some(tier.to_string()),
        _ => None,
    };
    if let Some(tier) = &tier {
        run.tier = Some(tier.clone());
    }
    if let Some((raw, text)) = &content {
        run.add(number, -1, text);
        if choice.delta.tool_calls.is_none() {
            // The raw value lies within the payload (decoded from it in place).
            let head = raw.get().as_ptr() as usize - payload.as_ptr() as usize;
            let tail = payload.len() - head - raw.get().len();
            if templates.len() == TEMPLATES {
                templates.remove(0);
            }
            templates.push(Template {
                payload: payload.to_vec(),
                head,
                tail,
                choice: number,
                tier,
            });
        }
    }
    if let Some(fragments) = &choice.delta.tool_calls {
        for fragment in fragments {
            let wire = i64::from(fragment.index.unwrap_or(0));
            run.add(number, wire, &fragment.function.arguments);
        }
    }
    run.taken += 1;
    true
}

/// Take `payloads` into `run` in order, up to the first that is not plain; returns how many it took.
fn scan(payloads: &[&[u8]], seen: &Seen, run: &mut Run, templates: &mut Vec<Template>) -> usize {
    let before = run.taken;
    for payload in payloads {
        if !take(payload, seen, run, templates) {
            break;
        }
    }
    run.taken - before
}

/// Frames are read from the list a window at a time, the first this many and each next one twice
/// the last: a run is read once, and a stream whose frames are seldom plain (usage on every chunk)
/// costs a window per attempt, not the rest of the stream.
const FIRST_WINDOW: usize = 32;

/// take_run(payloads, start, completion_id, calls) -> (taken, tier, pieces)
///
/// Read `payloads` (a list of bytes, each one data event's JSON) from `start` while each is a plain
/// chunk for the assembler's state: `completion_id` (str or None) and `calls`, a dict from each
/// choice begun to the list of its calls' wire indices begun. Stops at the first frame that is not
/// plain (or not bytes). Returns how many frames were taken, the last non-empty service tier they
/// named (or None), and a list of (choice, call, text): the joined content fragments of a choice
/// (call -1) or argument fragments of one of its calls, in the order first touched. Never raises
/// on the payloads' content.
#[pyfunction]
#[pyo3(text_signature = "(payloads, start, completion_id, calls)")]
fn take_run(
    py: Python<'_>,
    payloads: &PyList,
    start: usize,
    completion_id: Option<&PyAny>,
    calls: &PyDict,
) -> PyResult<(usize, Option<String>, Vec<(u64, i64, String)>)> {
    let completion_id = match completion_id {
        None => None,
        Some(value) => match value.downcast::<PyString>() {
            // Text that is not UTF-8 cannot equal any frame's id: nothing is plain.
            Ok(text) => match text.to_str() {
                Ok(text) => Some(text),
                Err(_) => return Ok((0, None, Vec::new())),
            },
            Err(_) => return Err(PyTypeError::new_err("completion_id is not a str or None")),
        },
    };
    let mut begun = HashMap::new();
    for (choice, wires) in calls.iter() {
        // A choice or call numbered beyond 64 bits is never a plain frame's (those are 32-bit).
        let choice = match choice.extract::<u64>() {
            Ok(choice) => choice,
            Err(_) => continue,
        };
        let wires: Vec<u64> = wires
            .iter()?
            .filter_map(|wire| wire.ok().and_then(|wire| wire.extract::<u64>().ok()))
            .collect();
        begun.insert(choice, wires);
    }
    let seen = Seen {
        completion_id,
        calls: begun,
    };
    let mut run = Run::default();
    let mut templates = Vec::with_capacity(TEMPLATES);
    let (mut position, mut window) = (start, FIRST_WINDOW);
    let end = payloads.len();
    while position < end {
        let mut frames: Vec<&[u8]> = Vec::with_capacity(window.min(end - position));
        let mut size = 0;
        for index in position..end.min(position + window) {
            match payloads.get_item(index)?.downcast::<PyBytes>() {
                Ok(bytes) => {
                    size += bytes.as_bytes().len();
                    frames.push(bytes.as_bytes());
                }
                Err(_) => break,
            }
        }
        let whole = frames.len() == window.min(end - position);
        let taken = if size < RELEASE_BYTES {
            scan(&frames, &seen, &mut run, &mut templates)
        } else {
            py.allow_threads(|| scan(&frames, &seen, &mut run, &mut templates))
        };
        if taken < frames.len() || !whole {
            break;
        }
        position += taken;
        window *= 2;
    }
    Ok((run.taken, run.tier, run.pieces))
}

/// The plain chunk, recognized and absorbed in compiled code (native/src/lib.rs).
#[pymodule]
fn plain_chunk(_py: Python<'_>, module: &PyModule) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(take_run, module)?)?;
    Ok(())
}
