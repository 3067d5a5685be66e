// rmqfs oracle stub (our code, not fastjson2's): the annotation RocketMQ 5.3.3's ACL enums
// (Action, ResourceType) carry; fastjson2 is not in ~/.m2 and the store never serializes them.
package com.alibaba.fastjson2.annotation;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.METHOD, ElementType.FIELD, ElementType.PARAMETER})
public @interface JSONField {
    boolean value() default false;

    String name() default "";

    boolean serialize() default true;

    boolean deserialize() default true;
}
