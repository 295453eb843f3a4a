//! Limits and deltas: the numbers of the ledger, with every sum checked.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::limits::{MAX_COUNT, MAX_RESOURCES_PER_REQUEST};
use crate::{InvalidInput, ResourceName};

/// A limit: -1 is unlimited, 0 and above is a hard cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Limit(i64);

impl Limit {
    pub const UNLIMITED: Limit = Limit(-1);

    pub fn new(value: i64) -> Result<Self, InvalidInput> {
        if value < -1 {
            return Err(InvalidInput::Limit(value));
        }
        Ok(Limit(value))
    }

    pub fn value(self) -> i64 {
        self.0
    }

    /// The cap, or `None` when unlimited.
    pub fn cap(self) -> Option<i64> {
        (self.0 >= 0).then_some(self.0)
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Limit::new(i64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// A set of limits by resource, as given to a limits command (1 to 64 of them).
pub type Limits = BTreeMap<ResourceName, Limit>;

pub fn check_limits(limits: &Limits) -> Result<(), InvalidInput> {
    if limits.is_empty() {
        return Err(InvalidInput::EmptyLimits);
    }
    if limits.len() > MAX_RESOURCES_PER_REQUEST {
        return Err(InvalidInput::TooManyResources(limits.len()));
    }
    Ok(())
}

/// The deltas of one reservation: 1 to 64 resources, each a signed amount. Serialised as a map
/// from resource to amount.
///
/// Kept as a slice sorted by resource: a project's state keeps every reservation it ever had,
/// and a B-tree map allocates a node for eleven entries (about 370 bytes) where a reservation
/// has a handful.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Deltas(Box<[(ResourceName, i64)]>);

impl Deltas {
    pub fn new(deltas: BTreeMap<ResourceName, i64>) -> Result<Self, InvalidInput> {
        if deltas.is_empty() {
            return Err(InvalidInput::EmptyDeltas);
        }
        if deltas.len() > MAX_RESOURCES_PER_REQUEST {
            return Err(InvalidInput::TooManyResources(deltas.len()));
        }
        // A map's entries come in key order, each key once: the slice is sorted.
        Ok(Deltas(deltas.into_iter().collect()))
    }

    /// In resource order.
    pub fn iter(&self) -> impl Iterator<Item = (&ResourceName, i64)> {
        self.0.iter().map(|(r, d)| (r, *d))
    }

    /// In order, each once.
    pub fn resources(&self) -> impl Iterator<Item = &ResourceName> {
        self.0.iter().map(|(r, _)| r)
    }

    pub fn get(&self, resource: &ResourceName) -> i64 {
        self.0
            .binary_search_by(|(r, _)| r.cmp(resource))
            .map_or(0, |i| self.0[i].1)
    }
}

impl Serialize for Deltas {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Deltas {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Deltas::new(BTreeMap::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// `a + b`, or the overflow error naming the resource.
pub fn checked_add(resource: &ResourceName, a: i64, b: i64) -> Result<i64, InvalidInput> {
    a.checked_add(b)
        .ok_or_else(|| InvalidInput::Overflow(resource.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> ResourceName {
        ResourceName::parse(s).unwrap()
    }

    #[test]
    fn limits_are_minus_one_or_more() {
        assert_eq!(Limit::new(-1).unwrap().cap(), None);
        assert_eq!(Limit::new(0).unwrap().cap(), Some(0));
        assert_eq!(Limit::new(i64::MAX).unwrap().cap(), Some(i64::MAX));
        assert!(Limit::new(-2).is_err());
        assert!(serde_json::from_str::<Limit>("-5").is_err());
        assert!(serde_json::from_str::<Limit>("1.5").is_err());
    }

    #[test]
    fn deltas_are_bounded() {
        assert!(Deltas::new(BTreeMap::new()).is_err());
        let many: BTreeMap<_, _> = (0..65).map(|i| (r(&format!("r{i}")), 1)).collect();
        assert!(Deltas::new(many).is_err());
        assert!(serde_json::from_str::<Deltas>(r#"{"cores": 2, "ram": -4096}"#).is_ok());
        assert!(serde_json::from_str::<Deltas>(r#"{}"#).is_err());
        assert!(serde_json::from_str::<Deltas>(r#"{"bad name": 1}"#).is_err());
    }

    #[test]
    fn deltas_are_a_map_in_resource_order() {
        let deltas: Deltas =
            serde_json::from_str(r#"{"ram": -4096, "cores": 2, "gpus": 1}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&deltas).unwrap(),
            r#"{"cores":2,"gpus":1,"ram":-4096}"#
        );
        assert_eq!(deltas.get(&r("cores")), 2);
        assert_eq!(deltas.get(&r("ram")), -4096);
        assert_eq!(deltas.get(&r("disk")), 0);
        assert_eq!(
            deltas
                .resources()
                .map(ResourceName::as_str)
                .collect::<Vec<_>>(),
            ["cores", "gpus", "ram"]
        );
        let again: Deltas = serde_json::from_str(&serde_json::to_string(&deltas).unwrap()).unwrap();
        assert_eq!(again, deltas);
    }

    #[test]
    fn sums_are_checked() {
        assert!(checked_add(&r("x"), i64::MAX, 1).is_err());
        assert_eq!(checked_add(&r("x"), 2, -3).unwrap(), -1);
    }
}

/// `count: {min, max}` of a counted reserve (SPEC rule 9, Nova's `min_count`/`max_count`): its
/// deltas are per unit, and the grant is for the largest k in `min..=max` that fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CountRange {
    min: u32,
    max: u32,
}

impl CountRange {
    /// 1 ≤ min ≤ max ≤ [`MAX_COUNT`].
    pub fn new(min: u32, max: u32) -> Result<Self, InvalidInput> {
        if min < 1 || min > max || max > MAX_COUNT {
            return Err(InvalidInput::Count { min, max });
        }
        Ok(CountRange { min, max })
    }

    pub fn min(self) -> u32 {
        self.min
    }

    pub fn max(self) -> u32 {
        self.max
    }
}

/// A counted reserve's grant: the range asked for and the count granted in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Counted {
    pub range: CountRange,
    pub granted: u32,
}

impl Deltas {
    /// Every delta times `units`; an overflow is refused like every other sum.
    pub fn times(&self, units: u32) -> Result<Deltas, InvalidInput> {
        let map = self
            .iter()
            .map(|(resource, delta)| {
                delta
                    .checked_mul(i64::from(units))
                    .map(|product| (resource.clone(), product))
                    .ok_or_else(|| InvalidInput::Overflow(resource.clone()))
            })
            .collect::<Result<BTreeMap<_, _>, _>>()?;
        Deltas::new(map)
    }
}
