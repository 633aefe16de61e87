//! Comparing the object a server-side-apply dry run predicts with the live object, at the
//! observed fields; who changed a drifted field; how a drifted value is shown. Pure.
//!
//! The dry run is the live object with the layer's manifest applied, so every difference at a
//! field the layer declares is a change someone else made (or a field the API server refused to
//! keep), and fields only the live object has are never ours.
//!
//! Split by concern: `diff` (the comparison itself and JSON equality as the API server means
//! it), `managers` (who owns a drifted field, from `managedFields`) and `display` (a Secret's
//! `stringData` as stored, masking, and rendering a value for people). Everything is
//! re-exported here.

mod diff;
mod display;
mod managers;
#[cfg(test)]
mod test_support;

pub use self::diff::{FieldDrift, compare, values_equal};
pub use self::display::{MASKED, fold_string_data, mask_secret, render_value};
pub use self::managers::{applied_by, manager_of};
