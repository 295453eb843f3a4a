//! The numbers a reserve was judged on, per resource of the request, as both an over-quota
//! problem and a dry run show them: `limits`, `usage` and `headroom`.

use std::collections::BTreeMap;

use domain::{ResourceName, ResourceStanding};
use serde::Serialize;
use utoipa::ToSchema;

use crate::problem::ProblemUsage;

#[derive(Debug, Serialize, ToSchema)]
pub struct Standing {
    /// The effective limit of each resource (-1 unlimited).
    pub limits: BTreeMap<String, i64>,
    pub usage: BTreeMap<String, ProblemUsage>,
    /// `limit - in_use - reserved`, for the resources that have a limit.
    pub headroom: BTreeMap<String, i64>,
}

impl Standing {
    pub fn of(standing: &BTreeMap<ResourceName, ResourceStanding>) -> Standing {
        let mut out = Standing {
            limits: BTreeMap::new(),
            usage: BTreeMap::new(),
            headroom: BTreeMap::new(),
        };
        for (resource, s) in standing {
            let name = resource.to_string();
            out.limits.insert(name.clone(), s.limit.value());
            out.usage.insert(
                name.clone(),
                ProblemUsage {
                    in_use: s.in_use,
                    reserved: s.reserved,
                },
            );
            if let Some(room) = s.headroom() {
                out.headroom.insert(name, room);
            }
        }
        out
    }
}
