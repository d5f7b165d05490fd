//! The vocabulary of Weir: execution ids, join sets, history events, responses and results.
//! Pure data, no I/O.
