//! Configuration files: parsing, validation with paths, and fuzzing.

mod files;
mod fuzz;
