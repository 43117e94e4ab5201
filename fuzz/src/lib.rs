//! What the fuzz targets share: the per-packet programs' world for
//! `packet_programs` (the tc tests' bed, `lb-testbed`; frames from
//! structured input; the invariants checked after each frame).

pub mod packet_check;
pub mod packet_frame;
pub mod packet_seeds;
pub mod packet_world;
