//! One status for a set of objects.

use crate::Status;

/// Aggregates statuses against the status being waited for (kstatus' rules): an empty set is
/// the desired status; any Failed → Failed; else any Unknown → Unknown; else all equal to
/// `desired` → `desired`; else InProgress. So Terminating is not yet "deleted".
pub fn aggregate<I: IntoIterator<Item = Status>>(statuses: I, desired: Status) -> Status {
    let mut any_unknown = false;
    let mut all_desired = true;
    for status in statuses {
        match status {
            Status::Failed => return Status::Failed,
            Status::Unknown => any_unknown = true,
            s if s != desired => all_desired = false,
            _ => {}
        }
    }
    if any_unknown {
        Status::Unknown
    } else if all_desired {
        desired
    } else {
        Status::InProgress
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    #[test]
    fn aggregation_table() {
        let cases: &[(&[Status], Status, Status)] = &[
            (&[], Current, Current),
            (&[], NotFound, NotFound),
            (&[Current, Current], Current, Current),
            (&[Current, InProgress], Current, InProgress),
            (&[Current, Failed, Unknown], Current, Failed),
            (&[Current, Unknown], Current, Unknown),
            (&[NotFound, Terminating], NotFound, InProgress),
            (&[NotFound, NotFound], NotFound, NotFound),
            (&[Unknown, NotFound], NotFound, Unknown),
            (&[Terminating], Current, InProgress),
        ];
        for (statuses, desired, want) in cases {
            assert_eq!(
                aggregate(statuses.iter().copied(), *desired),
                *want,
                "{statuses:?} desired {desired:?}"
            );
        }
    }
}
