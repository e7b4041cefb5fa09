//! Multi-turn conversations and the providers' prompt caches.
//!
//! In a scenario with conversations, every request is one turn of a conversation of some
//! application. Clients keep [`ConversationSpec::open`] conversations going per sidecar and send
//! the next turn of a random one at each arrival, among those whose previous turn has its answer (a
//! turn carries the answers before it); when every one is still waiting, a new conversation starts.
//! A conversation that has had its turns is replaced by a new one. With
//! [`ConversationSpec::sticky`] sessions a conversation's turns all come through one sidecar;
//! without, through any sidecar of the fleet (a stateless application's replicas behind a load
//! balancer). A provider caches each prefix it has answered for [`ConversationSpec::ttl`]: the
//! application's long system prompt (what a first turn mostly is) and each conversation so far
//! (what a later turn mostly is, and what only the provider that answered the previous turn holds).
//! A cached prefix answers in [`ConversationSpec::hit_ttfc`] times the time to first chunk of a
//! miss.

use super::clock::Micros;
use crate::routing::{RngSource, SplitMix64};
use std::collections::HashMap;

/// How a scenario's sidecars converse and how long providers cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConversationSpec {
    /// Applications, each with its own system prompt; a conversation belongs to one at random.
    pub applications: u32,
    /// Fewest and most turns of a conversation (drawn uniformly).
    pub turns: (u32, u32),
    /// Conversations kept going at once, per sidecar.
    pub open: u32,
    /// Each conversation's turns come through one sidecar (else through any sidecar).
    pub sticky: bool,
    /// Time to first chunk of a cache hit, as a fraction of a miss's.
    pub hit_ttfc: f64,
    /// How long a provider keeps a prefix after answering it.
    pub ttl: Micros,
}

/// One request's place in its conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// The application (its system prompt).
    pub application: u32,
    /// The conversation, unique in the run.
    pub conversation: u64,
    /// 0 for the opening turn.
    pub number: u32,
}

impl Turn {
    /// The key sturnus derives from the request: a hash of the opening messages (the
    /// application's system prompt and the conversation's first question), the same on
    /// every turn of the conversation.
    pub fn key(&self) -> u64 {
        let opening = self.conversation ^ (u64::from(self.application) << 48);
        SplitMix64::new(opening).next_u64()
    }
}

/// One sidecar's open conversations.
#[derive(Debug)]
pub struct Talk {
    spec: ConversationSpec,
    /// How many conversations are kept going (more while every one waits for an answer).
    target: usize,
    open: Vec<Open>,
    /// The pool's conversations get ids `pool << 32 | counter`.
    next_id: u64,
    rng: SplitMix64,
}

/// An open conversation.
#[derive(Debug, Clone, Copy)]
struct Open {
    /// The turn to send next.
    turn: Turn,
    /// Turns left, including `turn`.
    left: u32,
    /// The previous turn has no answer yet.
    waiting: bool,
}

impl Talk {
    /// `open` conversations kept going, numbered from `pool << 32`, drawn from `seed`.
    pub fn new(spec: ConversationSpec, open: u32, pool: u32, seed: u64) -> Self {
        let mut talk = Self {
            spec,
            target: open.max(1) as usize,
            open: Vec::new(),
            next_id: u64::from(pool) << 32,
            rng: SplitMix64::new(seed),
        };
        for _ in 0..talk.target {
            let fresh = talk.fresh();
            talk.open.push(fresh);
        }
        talk
    }

    /// A new conversation: a random application and number of turns.
    fn fresh(&mut self) -> Open {
        let (lo, hi) = self.spec.turns;
        let span = u64::from(hi.saturating_sub(lo)) + 1;
        let turns = lo.max(1) + (self.rng.next_u64() % span) as u32;
        let application = (self.rng.next_u64() % u64::from(self.spec.applications.max(1))) as u32;
        let conversation = self.next_id;
        self.next_id += 1;
        let turn = Turn {
            application,
            conversation,
            number: 0,
        };
        Open {
            turn,
            left: turns,
            waiting: false,
        }
    }

    /// The next request: the next turn of a random open conversation whose previous turn has
    /// its answer, or the opening of a new one when every conversation is waiting.
    pub fn next_turn(&mut self) -> Turn {
        let ready = self.open.iter().filter(|o| !o.waiting).count();
        let i = if ready == 0 {
            let fresh = self.fresh();
            self.open.push(fresh);
            self.open.len() - 1
        } else {
            let nth = (self.rng.next_u64() % ready as u64) as usize;
            let ready_at = self.open.iter().enumerate().filter(|(_, o)| !o.waiting);
            ready_at.map(|(i, _)| i).nth(nth).unwrap_or(0)
        };
        let Open { turn, left, .. } = self.open[i];
        if left > 1 {
            self.open[i] = Open {
                turn: Turn {
                    number: turn.number + 1,
                    ..turn
                },
                left: left - 1,
                waiting: true,
            };
        } else if self.open.len() > self.target {
            self.open.swap_remove(i);
        } else {
            self.open[i] = self.fresh();
        }
        turn
    }

    /// `turn` has its answer (or its client gave up on it): its conversation may go on.
    pub fn answered(&mut self, turn: &Turn) {
        let next = turn.number + 1;
        if let Some(o) = self
            .open
            .iter_mut()
            .find(|o| o.turn.conversation == turn.conversation && o.turn.number == next)
        {
            o.waiting = false;
        }
    }
}

/// One provider's prompt cache: per prefix, from when it is cached and until when.
#[derive(Debug, Default)]
pub struct PrefixCache {
    applications: HashMap<u32, Cached>,
    /// Per conversation and turn, the prompt of that turn (everything a later turn starts with).
    prompts: HashMap<(u64, u32), Cached>,
}

/// A cached prefix: held from `since` (its first answer) to `until` (the last answer + TTL).
#[derive(Debug, Clone, Copy)]
struct Cached {
    since: Micros,
    until: Micros,
}

impl Cached {
    fn holds(&self, now: Micros) -> bool {
        self.since <= now && now <= self.until
    }

    /// Answered again at `at`: an answer within the TTL extends the entry (an answer still on
    /// its way does not hide it meanwhile); one after it expired starts it afresh.
    fn answered(entry: Option<&mut Cached>, at: Micros, ttl: Micros) -> Option<Cached> {
        match entry {
            Some(c) if at <= c.until => {
                c.since = c.since.min(at);
                c.until = c.until.max(at + ttl);
                None
            }
            _ => Some(Cached {
                since: at,
                until: at + ttl,
            }),
        }
    }
}

impl PrefixCache {
    /// Whether `turn`'s prefix is cached at `now`: its application's system prompt for an
    /// opening turn; for a later turn, the previous turn's prompt, which only the provider
    /// that answered that turn holds (an older turn's prompt is a shorter prefix: a miss).
    pub fn hit(&self, turn: &Turn, now: Micros) -> bool {
        let cached = match turn.number.checked_sub(1) {
            None => self.applications.get(&turn.application),
            Some(previous) => self.prompts.get(&(turn.conversation, previous)),
        };
        cached.is_some_and(|c| c.holds(now))
    }

    /// `turn` was answered at `at`: its system prompt and its own prompt are cached from then
    /// until `ttl` after their last answer.
    pub fn store(&mut self, turn: &Turn, at: Micros, ttl: Micros) {
        if let Some(fresh) = Cached::answered(self.applications.get_mut(&turn.application), at, ttl)
        {
            self.applications.insert(turn.application, fresh);
        }
        let prompt = (turn.conversation, turn.number);
        if let Some(fresh) = Cached::answered(self.prompts.get_mut(&prompt), at, ttl) {
            self.prompts.insert(prompt, fresh);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::clock::SEC;
    use super::*;

    fn spec() -> ConversationSpec {
        ConversationSpec {
            applications: 4,
            turns: (3, 8),
            open: 5,
            sticky: true,
            hit_ttfc: 0.3,
            ttl: 300 * SEC,
        }
    }

    #[test]
    fn conversations_have_three_to_eight_turns_in_order() {
        let mut talk = Talk::new(spec(), 5, 7, 1);
        let mut seen: HashMap<u64, Vec<u32>> = HashMap::new();
        for _ in 0..5000 {
            let t = talk.next_turn();
            talk.answered(&t);
            assert!(t.application < 4);
            assert_eq!(t.conversation >> 32, 7);
            seen.entry(t.conversation).or_default().push(t.number);
        }
        let mut finished = 0;
        for numbers in seen.values() {
            let expected: Vec<u32> = (0..numbers.len() as u32).collect();
            assert_eq!(numbers, &expected);
            assert!(numbers.len() <= 8);
            finished += usize::from(numbers.len() >= 3);
        }
        // All but the (at most 5) still open ones reached three turns.
        assert!(finished + 5 >= seen.len(), "{finished} of {}", seen.len());
        let mean = 5000.0 / seen.len() as f64;
        assert!((5.0..6.0).contains(&mean), "{mean} turns on average");
    }

    #[test]
    fn a_turn_waits_for_the_previous_answer_and_a_new_conversation_starts_meanwhile() {
        let mut talk = Talk::new(spec(), 2, 0, 3);
        let (a, b) = (talk.next_turn(), talk.next_turn());
        assert_ne!(
            a.conversation, b.conversation,
            "a waiting one is not picked"
        );
        let c = talk.next_turn();
        assert_eq!(c.number, 0, "both wait: a new conversation");
        assert!(c.conversation != a.conversation && c.conversation != b.conversation);
        talk.answered(&a);
        let next = talk.next_turn();
        assert_eq!((next.conversation, next.number), (a.conversation, 1));
        talk.answered(&next);
        talk.answered(&b);
        talk.answered(&c);
        // Once its conversation ends, a conversation beyond the two kept going is not replaced.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let t = talk.next_turn();
            seen.insert(t.conversation);
            talk.answered(&t);
        }
        assert!(talk.open.len() == 2, "{} open", talk.open.len());
        assert!(seen.len() > 3);
    }

    #[test]
    fn a_key_is_the_same_on_every_turn_and_differs_between_conversations() {
        let a = Turn {
            application: 1,
            conversation: 9,
            number: 0,
        };
        assert_eq!(a.key(), Turn { number: 4, ..a }.key());
        assert_ne!(
            a.key(),
            Turn {
                conversation: 10,
                ..a
            }
            .key()
        );
        assert_ne!(
            a.key(),
            Turn {
                application: 2,
                ..a
            }
            .key()
        );
    }

    #[test]
    fn the_cache_holds_prefixes_for_the_ttl_from_the_answer() {
        let ttl = 300 * SEC;
        let mut cache = PrefixCache::default();
        let first = Turn {
            application: 1,
            conversation: 9,
            number: 0,
        };
        let second = Turn { number: 1, ..first };
        assert!(!cache.hit(&first, 0));
        cache.store(&first, 10 * SEC, ttl);
        assert!(!cache.hit(&second, 5 * SEC), "not answered yet");
        assert!(cache.hit(&second, 10 * SEC));
        assert!(cache.hit(&second, 310 * SEC));
        assert!(!cache.hit(&second, 311 * SEC), "expired");
        // Another conversation of the same application: its opening hits the system prompt,
        // its later turns do not.
        let other = Turn {
            conversation: 10,
            ..first
        };
        assert!(cache.hit(&other, 20 * SEC));
        assert!(!cache.hit(&Turn { number: 1, ..other }, 20 * SEC));
        // An answer still on its way neither hides the entry nor shortens it.
        cache.store(&first, 200 * SEC, ttl);
        assert!(cache.hit(&second, 100 * SEC));
        cache.store(&first, 50 * SEC, ttl);
        assert!(cache.hit(&second, 500 * SEC));
        assert!(!cache.hit(&second, 501 * SEC));
        // After it expired, an answer starts it afresh.
        cache.store(&first, 900 * SEC, ttl);
        assert!(!cache.hit(&second, 850 * SEC));
        assert!(cache.hit(&second, 900 * SEC));
    }

    #[test]
    fn a_later_turn_hits_only_where_the_previous_turn_was_answered() {
        let ttl = 300 * SEC;
        let turn = |number| Turn {
            application: 1,
            conversation: 9,
            number,
        };
        let (mut here, mut there) = (PrefixCache::default(), PrefixCache::default());
        here.store(&turn(0), SEC, ttl);
        there.store(&turn(1), 2 * SEC, ttl);
        here.store(&turn(2), 3 * SEC, ttl);
        assert!(
            here.hit(&turn(3), 4 * SEC),
            "the previous turn was answered here"
        );
        assert!(
            !there.hit(&turn(3), 4 * SEC),
            "only an older, shorter prompt is here"
        );
        assert!(there.hit(&turn(2), 4 * SEC));
        assert!(
            !here.hit(&turn(2), 4 * SEC),
            "turn 1 was answered elsewhere"
        );
        assert!(here.hit(&turn(0), 4 * SEC) && there.hit(&turn(0), 4 * SEC));
    }
}
