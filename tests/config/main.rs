//! Configuration files: parsing, validation with paths, and fuzzing.

mod every_field;
mod files;
mod fuzz;
mod setters;
