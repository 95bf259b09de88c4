/* A start flag's descriptor without a release (ring/op_ring_device.cuh,
 * StoreDescriptor and AwaitDescriptor; docs/latency.md, the eighth cut), as
 * a Promela model for SPIN. Checked by ring/model/check.sh beside
 * op_ring.pml, which models the descriptors as the host reads them.
 *
 * One line of one block: a writer (the rank that publishes its start flag
 * and descriptor words there) and a reader (a peer's block that waits for
 * the flag and compares the words). The writer's stores are strong but
 * unordered: each op it stores its W tagged words and its flag in any order,
 * each store one atomic step (a 64-bit word is single-copy atomic). A poll of
 * the reader loads the words and the flag in any order; it accepts op i's
 * descriptor once the flag is i and every word carries op i's tag. The end
 * barrier: the writer starts op i + 1 only once the reader is through op i.
 * W = 2 words stand for the code's six.
 *
 * Safety, asserted: the words a reader accepts for op i are the ones the
 * writer stored for op i (each op's are chosen anew, so a stale word can
 * differ from this op's).
 *
 * TAG_BITS1 (safe): tags of one bit, the generation's lowest. Safe all the
 * same while every op rewrites the line: a stale word is then one op old.
 * Unsafe variants (each must give SPIN a counterexample; check.sh runs them):
 *   UNTAGGED_START  the reader takes the words without their tags (what the
 *                   kernel's flag without release would do with the untagged
 *                   descriptor it had before)
 *   TAG_WRAP        one-bit tags and an op (op 2) that leaves the line alone,
 *                   as a block index that a smaller launch does not run: the
 *                   code's tags keep 32 bits, so this needs a line 2^32 ops
 *                   stale (ring/gpu_control_layout.h)
 */
#ifndef K
#define K 3            /* ops */
#endif
#define W 2            /* tagged descriptor words */

#ifdef TAG_WRAP
#define TAG_BITS1
#define SKIPPED(i) ((i) == 2)
#else
#define SKIPPED(i) false
#endif
#ifdef TAG_BITS1
#define TAG(i) ((i) % 2)
#else
#define TAG(i) (i)
#endif
#ifdef UNTAGGED_START
#define FRESH(i) true
#else
#define FRESH(i) (t[0] == TAG(i) && t[1] == TAG(i))
#endif

byte flag;               /* the start flag: the generation */
byte tag[W];             /* a word's tag ... */
bit val[W];              /* ... and its half of the descriptor (one store) */
bit wrote[(K + 1) * W];  /* what the writer stored in word w for op i */
byte reader_end;         /* the reader's end flag: the last op it is through */

active proctype Writer() {
  byte i = 1, w;
  bit pending[W];
  bit flag_pending;
  do
  :: i > K -> break
  :: else ->
     (reader_end >= i - 1);  /* the end barrier of op i - 1 */
     if
     :: SKIPPED(i) -> skip
     :: else ->
        w = 0;
        do
        :: w < W ->
           if
           :: wrote[i * W + w] = 0
           :: wrote[i * W + w] = 1
           fi;
           pending[w] = 1;
           w++
        :: else -> break
        od;
        flag_pending = 1;
        do  /* strong stores, no fence: in any order */
        :: flag_pending -> flag = i; flag_pending = 0
        :: pending[0] -> atomic { tag[0] = TAG(i); val[0] = wrote[i * W] }; pending[0] = 0
        :: pending[1] -> atomic { tag[1] = TAG(i); val[1] = wrote[i * W + 1] }; pending[1] = 0
        :: !flag_pending && !pending[0] && !pending[1] -> break
        od
     fi;
     i++
  od
}

active proctype Reader() {
  byte i = 1, f;
  byte t[W];
  bit v[W];
  bit got[W];
  bit got_flag;
  do
  :: i > K -> break
  :: else ->
     if
     :: SKIPPED(i) -> skip  /* the reader's block does not run this op either */
     :: else ->
        do  /* polls */
        :: got_flag = 0; got[0] = 0; got[1] = 0;
           do  /* one poll's loads: in any order */
           :: !got_flag -> f = flag; got_flag = 1
           :: !got[0] -> atomic { t[0] = tag[0]; v[0] = val[0] }; got[0] = 1
           :: !got[1] -> atomic { t[1] = tag[1]; v[1] = val[1] }; got[1] = 1
           :: got_flag && got[0] && got[1] -> break
           od;
           if
           :: f == i && FRESH(i) -> break
           :: else -> skip
           fi
        od;
        assert(v[0] == wrote[i * W] && v[1] == wrote[i * W + 1])
     fi;
     reader_end = i;
     i++
  od
}
