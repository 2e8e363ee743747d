// dispatch.hpp - the one place where the engine's run-time choices become template arguments.
//
//   dispatch(f, choice...)  calls f(tag...) once, with the compile-time tags that the choices'
//                           run-time values select; every combination is compiled.
// A tag is Type<T> (read typename decltype(tag)::type) or Value<V> (decltype(tag)::value).
// The choices, in the order their tags reach f:
//   Rows{bf16}                      Type<Bf16Bits> or Type<float>: one row element type
//   BankRows{bf16_bank, bf16_grad}  the bank's and the gradient bank's row types (E, Gt): (float,
//                                   float), (Bf16Bits, Bf16Bits) or (Bf16Bits, float)
//   Snapshot{mode}                  Value<SnapshotQuant>, after Rows / BankRows: bf16 on a bf16 bank
//                                   is none (as core::effective_snapshot_mode has it)
//   VecWidth{vec8}                  Value<8> (16-byte row accesses) or Value<1>
//   TileCols{cols}                  Value<32>, Value<16> or Value<8> (chunk::tile_cols)
//   Flag{on}                        Value<true> or Value<false>: any other kernel variant
// Example: dispatch([&](auto e, auto vec) { launch<typename decltype(e)::type,
//                   decltype(vec)::value>(...); }, Rows{bf16}, VecWidth{vec8});
#pragma once

#include <tuple>
#include <type_traits>

#include "cuda/common/row_types.hpp"
#include "sdm/options.hpp"

namespace sdm::cuda {

template <typename T>
struct Type {
  using type = T;
};
template <auto V>
struct Value {
  static constexpr auto value = V;
};

// Each choice's select(g, prior...) calls g with its tags for the run-time value; prior are the
// tags of the choices before it (only Snapshot reads them).
struct Rows {
  bool bf16;
  template <typename G, typename... Prior>
  void select(G&& g, Prior...) const {
    if (bf16) g(Type<Bf16Bits>{});
    else g(Type<float>{});
  }
};

struct BankRows {
  bool bf16_bank, bf16_grad;
  template <typename G, typename... Prior>
  void select(G&& g, Prior...) const {
    if (!bf16_bank) g(Type<float>{}, Type<float>{});
    else if (bf16_grad) g(Type<Bf16Bits>{}, Type<Bf16Bits>{});
    else g(Type<Bf16Bits>{}, Type<float>{});
  }
};

// After Rows or BankRows (the first prior tag is the bank's row type): bf16 snapshots of a bf16
// bank are stored as none, so that pair is neither selected nor compiled.
struct Snapshot {
  SnapshotQuant mode;
  template <typename G, typename Bank, typename... Prior>
  void select(G&& g, Bank, Prior...) const {
    constexpr bool bf16_bank = std::is_same_v<typename Bank::type, Bf16Bits>;
    switch (mode) {
      case SnapshotQuant::fp8: g(Value<SnapshotQuant::fp8>{}); return;
      case SnapshotQuant::int4: g(Value<SnapshotQuant::int4>{}); return;
      case SnapshotQuant::bf16:
        if constexpr (!bf16_bank) {
          g(Value<SnapshotQuant::bf16>{});
          return;
        }
        break;
      case SnapshotQuant::none: break;
    }
    g(Value<SnapshotQuant::none>{});
  }
};

struct VecWidth {
  bool vec8;
  template <typename G, typename... Prior>
  void select(G&& g, Prior...) const {
    if (vec8) g(Value<8>{});
    else g(Value<1>{});
  }
};

struct TileCols {
  int cols;
  template <typename G, typename... Prior>
  void select(G&& g, Prior...) const {
    if (cols == 32) g(Value<32>{});
    else if (cols == 16) g(Value<16>{});
    else g(Value<8>{});
  }
};

struct Flag {
  bool on;
  template <typename G, typename... Prior>
  void select(G&& g, Prior...) const {
    if (on) g(Value<true>{});
    else g(Value<false>{});
  }
};

namespace detail {

template <typename F, typename... Tags>
void dispatch_after(F& f, std::tuple<Tags...>) {
  f(Tags{}...);
}

template <typename F, typename... Tags, typename Choice, typename... Rest>
void dispatch_after(F& f, std::tuple<Tags...>, const Choice& choice, const Rest&... rest) {
  choice.select([&](auto... tags) { dispatch_after(f, std::tuple<Tags..., decltype(tags)...>{}, rest...); },
                Tags{}...);
}

}  // namespace detail

template <typename F, typename... Choices>
void dispatch(F&& f, const Choices&... choices) {
  detail::dispatch_after(f, std::tuple<>{}, choices...);
}

}  // namespace sdm::cuda
