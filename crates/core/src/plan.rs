//! Request planning for samples spread over several upstreams: which upstream each sample
//! goes to, how the samples are grouped into requests, and how many requests open at once.
//! The gateway plans a request's samples with it, and the CLI its `--fan-out`.

/// When a plan's requests start.
///
/// ```
/// use choicewise_core::plan::Opening;
/// assert_eq!(Opening::default(), Opening::All);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Opening {
    /// Every request at once; an upstream that takes `n` gets its samples in one request.
    #[default]
    All,
    /// The first `k` requests at once, the others on demand (a vote's window, the warmup of
    /// a confidence-guided vote): one sample per request.
    First(usize),
    /// One sample first, the others one at a time as a pick's hedge starts them
    /// ([`Pick::hedge_after`](crate::Pick::hedge_after)): one sample per request.
    Hedged,
}

/// An upstream as a plan sees it: its share of the samples, and whether it takes `n` (its
/// samples then go in one request when they all open at once).
///
/// ```
/// use choicewise_core::plan::PlanUpstream;
/// let u = PlanUpstream::new(2).native_n(true);
/// assert_eq!((u.weight(), u.takes_n()), (2, true));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanUpstream {
    weight: u32,
    native_n: bool,
    max_n: Option<u32>,
}

impl PlanUpstream {
    /// An upstream with this weight (its share of the samples; 0 gets none while another
    /// has weight) that takes one sample per request.
    pub fn new(weight: u32) -> Self {
        PlanUpstream {
            weight,
            native_n: false,
            max_n: None,
        }
    }

    /// The most samples one request to it may carry, when it takes `n` (a provider that
    /// refuses a larger `n`): its samples are split over requests of at most this many
    /// (`None`, the default: no limit; 0 counts as 1).
    ///
    /// ```
    /// use choicewise_core::plan::{Opening, Plan, PlanUpstream};
    /// let upstreams = [PlanUpstream::new(1).native_n(true).max_n(Some(2))];
    /// let plan = Plan::new(5, &upstreams, Opening::All);
    /// let sizes: Vec<usize> = plan.requests().iter().map(|r| r.samples().len()).collect();
    /// assert_eq!(sizes, [2, 2, 1]);
    /// ```
    pub fn max_n(mut self, max: Option<u32>) -> Self {
        self.max_n = max.map(|m| m.max(1));
        self
    }

    /// Whether it takes `n` (several samples in one request).
    pub fn native_n(mut self, native: bool) -> Self {
        self.native_n = native;
        self
    }

    /// Its weight.
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Whether it takes `n`.
    pub fn takes_n(&self) -> bool {
        self.native_n
    }
}

/// One request of a plan: the upstream it goes to and its samples, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRequest {
    upstream: usize,
    samples: Vec<u32>,
}

impl PlannedRequest {
    /// The upstream (its position in the plan's list).
    pub fn upstream(&self) -> usize {
        self.upstream
    }

    /// Its samples (their numbers, `0..samples`), in order: the request's `n` is their count.
    pub fn samples(&self) -> &[u32] {
        &self.samples
    }
}

/// The requests that make `samples` samples over some upstreams. Each sample goes to the
/// next upstream by smooth weighted round robin (nginx's: with equal weights, sample `i` to
/// upstream `i mod k`); with [`Opening::All`], an upstream that takes `n` gets one request of
/// its samples (several of at most [`max_n`](PlanUpstream::max_n) when it has one), any
/// other one request per sample; otherwise every request is one sample, in
/// sample order, so that they can start one at a time.
///
/// ```
/// use choicewise_core::plan::{Opening, Plan, PlanUpstream};
/// let upstreams = [PlanUpstream::new(1).native_n(true), PlanUpstream::new(1)];
/// let plan = Plan::new(4, &upstreams, Opening::All);
/// let requests: Vec<(usize, &[u32])> = plan.requests().iter().map(|r| (r.upstream(), r.samples())).collect();
/// assert_eq!(requests, [(0, &[0, 2][..]), (1, &[1][..]), (1, &[3][..])]);
/// assert_eq!(plan.opened_at_start(), 3);
///
/// let hedged = Plan::new(3, &upstreams, Opening::Hedged);
/// assert_eq!(hedged.requests().len(), 3);
/// assert_eq!(hedged.opened_at_start(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    requests: Vec<PlannedRequest>,
    opening: Opening,
}

impl Plan {
    /// Plans `samples` samples over `upstreams` (none planned without an upstream).
    pub fn new(samples: u32, upstreams: &[PlanUpstream], opening: Opening) -> Plan {
        if upstreams.is_empty() {
            return Plan {
                requests: Vec::new(),
                opening,
            };
        }
        // Each turn every upstream gains its weight; the one with the most is chosen and
        // loses the total.
        let total: i64 = upstreams.iter().map(|u| i64::from(u.weight)).sum();
        let mut current = vec![0i64; upstreams.len()];
        let mut to = Vec::with_capacity(samples as usize);
        for _ in 0..samples {
            for (c, u) in current.iter_mut().zip(upstreams) {
                *c += i64::from(u.weight);
            }
            let (j, _) = (current.iter().enumerate())
                .max_by_key(|(j, c)| (**c, std::cmp::Reverse(*j)))
                .unwrap_or((0, &0));
            current[j] -= total;
            to.push(j);
        }
        let mut requests = Vec::new();
        if opening == Opening::All {
            for (j, u) in upstreams.iter().enumerate() {
                let mine: Vec<u32> = (0..samples).filter(|i| to[*i as usize] == j).collect();
                match (mine.is_empty(), u.native_n) {
                    (true, _) => {}
                    (false, true) => {
                        let size = u.max_n.map_or(mine.len(), |m| m as usize);
                        requests.extend(mine.chunks(size).map(|part| PlannedRequest {
                            upstream: j,
                            samples: part.to_vec(),
                        }));
                    }
                    (false, false) => requests.extend(mine.into_iter().map(|i| PlannedRequest {
                        upstream: j,
                        samples: vec![i],
                    })),
                }
            }
        } else {
            requests.extend(to.iter().enumerate().map(|(i, j)| PlannedRequest {
                upstream: *j,
                samples: vec![i as u32],
            }));
        }
        Plan { requests, opening }
    }

    /// Its requests, in the order they start (a completion numbers their choices in blocks,
    /// in this order).
    pub fn requests(&self) -> &[PlannedRequest] {
        &self.requests
    }

    /// When its requests start.
    pub fn opening(&self) -> Opening {
        self.opening
    }

    /// How many requests start at once: all, the first `k`, or one when hedged.
    pub fn opened_at_start(&self) -> usize {
        match self.opening {
            Opening::All => self.requests.len(),
            Opening::First(k) => k.min(self.requests.len()),
            Opening::Hedged => 1.min(self.requests.len()),
        }
    }

    /// Whether some requests start on demand (later than the first ones), so that the
    /// completion is one of samples made on demand
    /// ([`samples`](crate::CompletionsBuilder::samples)) rather than a fixed fan-out.
    pub fn on_demand(&self) -> bool {
        self.opening != Opening::All
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(samples: u32, weights: &[u32]) -> Vec<usize> {
        let upstreams: Vec<PlanUpstream> = weights.iter().map(|w| PlanUpstream::new(*w)).collect();
        let plan = Plan::new(samples, &upstreams, Opening::First(1));
        plan.requests().iter().map(|r| r.upstream()).collect()
    }

    #[test]
    fn weights_share_the_samples_smoothly() {
        assert_eq!(spread(4, &[1, 1]), [0, 1, 0, 1]);
        assert_eq!(spread(6, &[2, 1]), [0, 1, 0, 0, 1, 0]);
        assert_eq!(spread(3, &[0, 1]), [1, 1, 1]);
        assert!(Plan::new(3, &[], Opening::All).requests().is_empty());
    }

    #[test]
    fn on_demand_plans_are_one_sample_per_request_in_order() {
        let upstreams = [PlanUpstream::new(1).native_n(true); 2];
        let plan = Plan::new(5, &upstreams, Opening::First(2));
        let samples: Vec<&[u32]> = plan.requests().iter().map(|r| r.samples()).collect();
        assert_eq!(samples, [&[0][..], &[1], &[2], &[3], &[4]]);
        assert_eq!(plan.opened_at_start(), 2);
        assert!(plan.on_demand());
        assert_eq!(
            Plan::new(1, &upstreams, Opening::First(9)).opened_at_start(),
            1
        );
    }
}
