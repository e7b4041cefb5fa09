//! The opening messages of a conversation, found while the scan passes over them.
//!
//! A multi-turn conversation resends its whole history on every turn, so its opening (the leading
//! `system`/`developer` messages and the first message after them, usually the user's first
//! question) is the same bytes on every turn: a key for the conversation that needs no state.
//! The scan reports the events of the top-level `messages` (chat completions) or `input`
//! (responses) list; a list whose elements are not objects (embeddings' strings or tokens), a
//! string `input`, or a list of system messages only has no opening.

use std::ops::Range;

/// Tracks the conversation's message list during the scan.
#[derive(Debug, Default)]
pub(super) struct Opening {
    state: State,
}

#[derive(Debug, Default)]
enum State {
    /// Not inside a message list, or the list seen has no opening.
    #[default]
    Outside,
    /// Inside the list (at depth 2): where its first message starts, whether the message
    /// being scanned is a system one, and whether a system message came before it.
    InList {
        start: Option<usize>,
        system: bool,
        led: bool,
    },
    /// The opening messages were found.
    Found(Found),
}

/// A conversation's opening messages, as the scan found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    /// The bytes of the opening messages.
    pub range: Range<usize>,
    /// Whether they start with `system`/`developer` messages (a system prompt).
    pub led: bool,
}

impl Opening {
    /// The value of a top-level `messages`/`input` member starts; the last such member counts.
    #[inline]
    pub fn list_starts(&mut self, is_array: bool) {
        self.state = if is_array {
            State::InList {
                start: None,
                system: false,
                led: false,
            }
        } else {
            State::Outside
        };
    }

    /// Whether the scan is inside the message list, before its opening is complete.
    #[inline]
    pub fn in_list(&self) -> bool {
        matches!(self.state, State::InList { .. })
    }

    /// An element of the list starts at byte `at`; it must be an object to be a message.
    #[inline]
    pub fn message_starts(&mut self, is_object: bool, at: usize) {
        if let State::InList { start, system, .. } = &mut self.state {
            if !is_object {
                self.state = State::Outside;
                return;
            }
            start.get_or_insert(at);
            *system = false;
        }
    }

    /// The current message's string `role` was read: whether it is `system` or `developer`.
    #[inline]
    pub fn role(&mut self, is_system: bool) {
        if let State::InList { system, .. } = &mut self.state {
            *system = is_system;
        }
    }

    /// A container closed, leaving the scan at `depth`, with `end` just past its closing byte.
    #[inline]
    pub fn closed(&mut self, depth: usize, end: usize) {
        if let State::InList { start, system, led } = self.state {
            match (depth, start) {
                (2, Some(start)) if !system => {
                    let range = start..end;
                    self.state = State::Found(Found { range, led });
                }
                (2, Some(_)) => {
                    self.state = State::InList {
                        start,
                        system,
                        led: true,
                    }
                }
                (1, _) => self.state = State::Outside,
                _ => {}
            }
        }
    }

    /// The opening messages, once the scan is over.
    pub fn found(self) -> Option<Found> {
        match self.state {
            State::Found(found) => Some(found),
            _ => None,
        }
    }
}
