//! The soak's mix of requests: each request drawn from its number and the seed (model,
//! `n` or selection, streamed or not, the upstream's fault and the client's), and its
//! request body.

use serde_json::json;

use crate::upstream::{Fault, Plan};

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Select {
    All,
    FirstFinished,
    Vote,
    FirstToken,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ClientFault {
    None,
    /// Goes away after this many events.
    Disconnect(usize),
    Slow,
}

#[derive(Debug, Clone)]
pub(super) struct Case {
    pub(super) plan: Plan,
    pub(super) model: &'static str,
    pub(super) n: u32,
    pub(super) samples: u32,
    pub(super) select: Select,
    pub(super) stream: bool,
    pub(super) client: ClientFault,
}

pub(super) fn case(seed: u64, k: usize) -> Case {
    let r = |salt: u64| splitmix(seed ^ (k as u64).wrapping_mul(0x1000_0001) ^ (salt << 56));
    let fault_draw = r(1) % 1000;
    let tick = 2 + (r(2) % 5) as u32;
    let (fault, mut client) = match fault_draw {
        0..25 => (Fault::Cut(tick), ClientFault::None),
        25..50 => (Fault::Stall(tick), ClientFault::None),
        50..75 => (Fault::Status(500), ClientFault::None),
        75..100 => (Fault::Status(429), ClientFault::None),
        100..200 => (
            Fault::None,
            ClientFault::Disconnect(1 + (r(3) % 4) as usize),
        ),
        200..300 => (Fault::None, ClientFault::Slow),
        _ => (Fault::None, ClientFault::None),
    };
    let (select, n, samples, stream) = match r(4) % 100 {
        0..50 => {
            let n = 1 + (r(5) % 4) as u32;
            (Select::All, n, n, true)
        }
        50..65 => (Select::FirstFinished, 1, 4, true),
        65..80 => (Select::Vote, 1, 5, true),
        80..90 => (Select::FirstToken, 1, 3, true),
        _ => {
            let n = 1 + (r(5) % 4) as u32;
            (Select::All, n, n, false)
        }
    };
    if !stream {
        client = ClientFault::None;
    }
    Case {
        plan: Plan {
            tag: k as u64,
            ticks: 4,
            spread: 3,
            first_us: 2_000,
            interval_us: 3_000,
            stamp: false,
            fault,
            tick_writes: false,
        },
        model: if r(6) % 2 == 0 { "native" } else { "fanout" },
        n,
        samples,
        select,
        stream,
        client,
    }
    .or_responses(r(7) % 100 < 3)
}

impl Case {
    /// This case as a request for model `responses` instead (the upstream's long
    /// Responses-API answer): one choice, streamed, every sample returned.
    fn or_responses(mut self, yes: bool) -> Case {
        if yes {
            self.model = "responses";
            self.n = 1;
            self.samples = 1;
            self.select = Select::All;
            self.stream = true;
            self.plan.fault = Fault::None;
        }
        self
    }
}

pub(super) fn body(c: &Case) -> String {
    let mut b = json!({
        "model": c.model,
        "n": c.n,
        "stream": c.stream,
        "messages": [{"role": "user", "content": c.plan.message()}],
    });
    match c.select {
        Select::All => {}
        Select::FirstFinished => {
            b["choicewise"] = json!({"samples": c.samples, "select": "first_finished"})
        }
        Select::Vote => {
            b["choicewise"] =
                json!({"samples": c.samples, "select": "vote", "vote_by": "Answer: (\\d+)"})
        }
        Select::FirstToken => {
            b["choicewise"] = json!({"samples": c.samples, "select": "first_token"})
        }
    }
    b.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_each_fault_near_its_share() {
        let cases: Vec<Case> = (0..10_000).map(|k| case(29, k)).collect();
        let share = |f: &dyn Fn(&Case) -> bool| cases.iter().filter(|c| f(c)).count();
        let upstream = share(&|c| c.plan.fault != Fault::None);
        let disconnects = share(&|c| matches!(c.client, ClientFault::Disconnect(_)));
        let slow = share(&|c| c.client == ClientFault::Slow);
        assert!((800..1200).contains(&upstream), "{upstream}");
        // Non-streamed requests read whole: their client faults are dropped.
        assert!((700..1100).contains(&disconnects), "{disconnects}");
        assert!((700..1100).contains(&slow), "{slow}");
        assert!(share(&|c| c.model == "native") > 4000);
        assert!(share(&|c| c.select == Select::Vote) > 1000);
    }
}
